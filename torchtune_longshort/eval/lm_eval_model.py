"""lm-eval model ``longshort``: a Hugging Face-format Llama-2-family checkpoint run through torchtune.

Use::

    python -m torchtune_longshort.eval run --model longshort \
        --model_args pretrained=/ckpt,max_length=8192,rope=linear,rope_factor=2 \
        --include_path evals/tasks --tasks long_ppl

Model arguments (``--model_args k=v,...``):
    pretrained: folder with ``config.json`` + safetensors (+ ``tokenizer.model``), as for lm-eval's ``hf`` model;
        lm-eval names the results folder after it. ``checkpoint_dir`` is the same argument under its older name.
    tokenizer: folder or ``tokenizer.model`` path (default: ``pretrained``).
    rope: RoPE scaling method name (overrides ``config.json``'s ``rope_scaling``); ``rope_<key>=<value>`` sets
        its parameters (``rope_factor=4``). Without ``rope``, the checkpoint's own scaling (if any) is used.
    max_length: longest sequence the model is run on (default: the checkpoint's positions x scaling factor).
    allow_extrapolation: run past the checkpoint's positions x scaling factor (default false: such requests
        get NaN / empty output and an error naming the fix, and the rest of the run goes on).
    batch_size: int (``auto`` is not supported: give a number).
    dtype: float32 | bfloat16 | float16.   device: cpu | cuda | cuda:N.
    truncation: none (default: a prompt longer than the model is refused, NaN with the reason) | left (lm-eval's
        ``hf``: keep the last tokens) | middle (keep first and last halves). Applies only to tasks that declare no
        truncation of their own: LongBench-E's docs declare ``middle`` (its protocol), passkey's ``none``
        (see ``torchtune_longshort.eval.truncation``).
    max_gen_toks: default generation budget (256, as in lm-eval's ``hf``).
    add_bos_token: prepend BOS when encoding (default true, like the Llama tokenizer under transformers).

Tokenisation follows lm-eval's ``hf`` model on a Llama tokenizer token for token (BOS handling, context/continuation
split, rolling windows, and with ``truncation=left`` its left truncation), so that the two give the same numbers on
the same checkpoint.

A request the model will not run (longer than it runs, a prompt it may not cut, no room to generate) is refused,
not cut or crashed on: its result carries the reason (``torchtune_longshort.eval.unavailable``), the task scores
it NaN with that reason in the results file, and the rest of the run goes on.

Beyond lm-eval's three request types the model answers ``next_token_divergence`` requests (the ``misalignment``
task): it runs the model on two suffixes of a text and compares the full next-token distributions (paper Eq. 4).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
import lm_eval.models  # noqa: F401  (fills lm-eval's registry first: it only self-populates when empty)
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from tqdm.auto import tqdm

from torchtune_longshort.eval.truncation import check_truncation, declared_truncation, truncate_tokens
from torchtune_longshort.models.hf_rope import usable_length_of  # noqa: F401  (its home; re-exported here)
from torchtune_longshort.eval.unavailable import RefusedScores, RefusedText

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Output projection is applied to this many positions at a time, so a 32k-token sequence never holds a full
# [T, vocab] float32 logit matrix (4 GB for Llama-2's 32k vocabulary).
_OUTPUT_CHUNK = 2048
# ... and at most this many logits (64 MiB in float32) per chunk, so a large vocabulary shortens the chunk.
_OUTPUT_CHUNK_ELEMENTS = 2**24
# Prefill of a generation prompt runs in chunks of this many positions (bounds the [q, kv] mask size).
_PREFILL_CHUNK = 4096


class TokenLoglikelihood(tuple):
    """``(logprob, is_greedy)`` as lm-eval expects, carrying the per-token log-probabilities as an attribute.

    lm-eval passes the object unchanged to a task's ``process_results``; ``long_ppl`` uses
    ``token_logprobs`` for its per-position loss curve. Other models return plain tuples. A refused request is
    ``(nan, False)`` with the reason in ``refusal`` (``torchtune_longshort.eval.unavailable.refusal_of``).
    """

    token_logprobs: List[float]
    refusal: str

    def __new__(cls, logprob: float, is_greedy: bool, token_logprobs: Sequence[float], refusal: str = ""):
        obj = super().__new__(cls, (logprob, is_greedy))
        obj.token_logprobs = list(token_logprobs)
        obj.refusal = refusal
        return obj

    @classmethod
    def refused(cls, reason: str) -> "TokenLoglikelihood":
        """The result of a request the model refused: NaN, with ``reason``."""
        return cls(float("nan"), False, [], reason)

    def __reduce__(self):
        # lm-eval's request cache pickles results; keep the attributes.
        return (TokenLoglikelihood, (self[0], self[1], self.token_logprobs, self.refusal))


def _parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no"):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name}={value!r} is not a boolean; accepted: true/false")


def _positive_int(name: str, value: Any) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not an integer") from None
    if out != float(value) or out < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return out


def load_checkpoint_model(
    checkpoint_dir: Union[str, Path],
    rope: Optional[Dict[str, Any]],
    max_seq_len: int,
    dtype: torch.dtype,
    device: str,
):
    """Load the checkpoint into a torchtune decoder with RoPE sized for ``max_seq_len`` positions.

    ``rope`` is ``None`` (take it from ``config.json``: plain RoPE or its scaling) or a spec such as
    ``{"method": "linear", "factor": 4.0}``; both go through ``torchtune_longshort.models.load_hf_checkpoint``.
    """
    from torchtune_longshort.models import load_hf_checkpoint

    model = load_hf_checkpoint(checkpoint_dir, rope=rope, max_seq_len=max_seq_len, dtype=dtype, device=device)
    return model.to(device=device, dtype=dtype).eval()


@register_model("longshort")
class LongShortLM(TemplateLM):
    """lm-eval model for HF-format Llama-2-family checkpoints loaded into torchtune (see module docstring)."""

    def __init__(
        self,
        pretrained: Optional[str] = None,
        checkpoint_dir: Optional[str] = None,
        tokenizer: Optional[str] = None,
        rope: Optional[str] = None,
        max_length: Optional[int] = None,
        allow_extrapolation: Union[bool, str] = False,
        batch_size: Union[int, str] = 1,
        max_batch_size: Optional[int] = None,
        dtype: str = "float32",
        device: Optional[str] = None,
        truncation: str = "none",
        max_gen_toks: int = 256,
        add_bos_token: Union[bool, str] = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        rope_kwargs = {k[len("rope_") :]: v for k, v in kwargs.items() if k.startswith("rope_")}
        unknown = sorted(k for k in kwargs if not k.startswith("rope_"))
        # lm-eval forwards some arguments to every model; they carry no meaning here.
        unknown = [k for k in unknown if k not in ("trust_remote_code", "pretrained_model_name_or_path")]
        if unknown:
            raise ValueError(
                f"longshort model: unknown model_args {unknown}; accepted: pretrained (or checkpoint_dir), tokenizer, "
                "rope, rope_<param>, max_length, allow_extrapolation, batch_size, dtype, device, truncation, "
                "max_gen_toks, add_bos_token"
            )
        if pretrained is not None and checkpoint_dir is not None and str(pretrained) != str(checkpoint_dir):
            raise ValueError(f"longshort model: pretrained={pretrained!r} and checkpoint_dir={checkpoint_dir!r} name "
                             "different checkpoints; give one of them (checkpoint_dir is pretrained's older name)")
        checkpoint_dir = pretrained if pretrained is not None else checkpoint_dir
        if checkpoint_dir is None:
            raise ValueError("longshort model: model_args needs pretrained=<folder with config.json + weights>")
        self.checkpoint_dir = Path(str(checkpoint_dir))
        from torchtune_longshort.models.hf_checkpoint import check_checkpoint_folder, read_hf_config

        from torchtune_longshort.models.hf_checkpoint import checkpoint_fingerprint

        check_checkpoint_folder(self.checkpoint_dir, need_tokenizer=tokenizer is None)
        config = read_hf_config(self.checkpoint_dir)
        self.checkpoint_fingerprint = checkpoint_fingerprint(self.checkpoint_dir)

        if rope_kwargs and rope is None:
            raise ValueError(f"longshort model: rope_* arguments {sorted(rope_kwargs)} given without rope=<method>")
        self.rope_spec: Optional[Dict[str, Any]] = None
        if rope is not None:
            self.rope_spec = {"method": str(rope), **rope_kwargs}
        from torchtune_longshort.models import rope_spec_from_hf_config

        effective_rope = self.rope_spec if self.rope_spec is not None else rope_spec_from_hf_config(config)
        native = int(config.get("max_position_embeddings", 4096))
        self.usable_length = usable_length_of(config, effective_rope)
        self._max_length = (
            _positive_int("max_length", max_length) if max_length is not None else self.usable_length
        )
        self.allow_extrapolation = _parse_bool("allow_extrapolation", allow_extrapolation)
        if self._max_length > self.usable_length:
            msg = (
                f"max_length={self._max_length} exceeds the {self.usable_length} positions this model covers "
                f"(config max_position_embeddings={native}, RoPE scaling={effective_rope!r})"
            )
            if self.allow_extrapolation:
                logger.warning("%s: allow_extrapolation=true, positions past it are extrapolated", msg)
            else:
                logger.error(
                    "%s: requests longer than %d tokens will be refused (NaN / empty output). Pass "
                    "rope=<method>,rope_factor=<f> to scale RoPE, or allow_extrapolation=true to run them anyway.",
                    msg,
                    self.usable_length,
                )
        self.run_limit = self._max_length if self.allow_extrapolation else min(self._max_length, self.usable_length)

        if isinstance(batch_size, str) and batch_size.startswith("auto"):
            raise ValueError(f"batch_size={batch_size!r} is not supported by the longshort model; give an integer")
        self._batch_size = _positive_int("batch_size", batch_size)
        if str(dtype) not in _DTYPES:
            raise ValueError(f"dtype={dtype!r} is not supported; accepted: {', '.join(_DTYPES)}")
        self.dtype = _DTYPES[str(dtype)]
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            # lm-eval's CLI passes device=cuda:0 when --device is not given.
            logger.warning("device=%r but CUDA is not available: running on cpu", device)
            device = "cpu"
        self._device = torch.device(device)
        self.truncation = check_truncation(str(truncation))
        self._max_gen_toks = _positive_int("max_gen_toks", max_gen_toks)
        self.add_bos_token = _parse_bool("add_bos_token", add_bos_token)

        tok_path = Path(str(tokenizer)) if tokenizer is not None else self.checkpoint_dir
        if tok_path.is_dir():
            tok_path = tok_path / "tokenizer.model"
        if not tok_path.is_file():
            raise FileNotFoundError(
                f"tokenizer={str(tok_path)!r} not found: pass tokenizer=<folder or tokenizer.model path>"
            )
        from torchtune.models.llama2 import llama2_tokenizer

        self.tokenizer = llama2_tokenizer(str(tok_path), prompt_template=None)
        self.tokenizer_path = tok_path

        self.model = load_checkpoint_model(
            self.checkpoint_dir, self.rope_spec, max_seq_len=self._max_length, dtype=self.dtype, device=str(self._device)
        )
        self.model.requires_grad_(False)
        self.vocab_size = int(config["vocab_size"])
        self._refused: Dict[Tuple[str, str], int] = defaultdict(int)

    # ------------------------------------------------------------------ lm-eval properties
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def prefix_token_id(self) -> int:
        return self.tokenizer.bos_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer_path)

    def get_model_info(self) -> dict:
        """Extra fields for lm-eval's results ``config`` block, with the project's provenance block (lm-eval calls
        this after the evaluation, so the stdlib corpus hash is there when a task used the corpus)."""
        from torchtune_longshort.provenance import provenance

        return {
            "checkpoint_dir": str(self.checkpoint_dir),
            "checkpoint_fingerprint": self.checkpoint_fingerprint,
            "rope": self.rope_spec,
            "max_length": self._max_length,
            "usable_length": self.usable_length,
            "truncation": self.truncation,
            "model_dtype": str(self.dtype),
            "provenance": provenance(device=str(self._device)),
        }

    # ------------------------------------------------------------------ tokenisation
    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None, **kwargs) -> List[int]:
        """Token ids of ``string``; BOS first unless ``add_special_tokens=False``, ``add_bos_token=false`` or the
        string already starts with the BOS text (the rules of lm-eval's ``hf`` model)."""
        add_bos = self.add_bos_token if add_special_tokens is None else bool(add_special_tokens)
        bos_text = "<s>"
        if add_special_tokens is None and string.startswith(bos_text):
            ids = [self.tokenizer.bos_id] + self.tokenizer.encode(string[len(bos_text) :], add_bos=False, add_eos=False)
            return ids
        return self.tokenizer.encode(string, add_bos=add_bos, add_eos=False)

    def tok_decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens`` with special tokens dropped."""
        special = {self.tokenizer.bos_id, self.tokenizer.eos_id, self.tokenizer.pad_id}
        return self.tokenizer.decode([t for t in tokens if t not in special])

    # ------------------------------------------------------------------ forward passes
    @contextmanager
    def _hidden_output(self) -> Iterator[None]:
        """Make the decoder return final-norm hidden states instead of logits (logits are projected lazily)."""
        model = self.model
        model.unembed = lambda h: model.norm(h)  # instance attribute shadows the method
        try:
            yield
        finally:
            del model.unembed

    def _output_rows(self) -> int:
        """Positions projected to the vocabulary at a time: at most ``_OUTPUT_CHUNK``, and at most
        ``_OUTPUT_CHUNK_ELEMENTS`` float32 logits (64 MiB: 524 positions of a 32k vocabulary, 130 of a 128k one)."""
        return max(1, min(_OUTPUT_CHUNK, _OUTPUT_CHUNK_ELEMENTS // max(1, self.vocab_size)))

    def _logprobs_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[n, d]`` final hidden states -> ``[n, vocab]`` float32 log-probabilities, projected in chunks.

        Holds all ``n`` rows' distributions by design (``next_token_logprobs``' contract); scoring uses
        :meth:`_target_logprobs`, which never does."""
        out = []
        step = self._output_rows()
        for s in range(0, hidden.shape[0], step):
            logits = self.model.output(hidden[s : s + step]).float()
            out.append(F.log_softmax(logits, dim=-1))
        return torch.cat(out, dim=0) if out else hidden.new_zeros((0, self.vocab_size), dtype=torch.float32)

    def _target_logprobs(self, hidden: torch.Tensor, target: torch.Tensor) -> Tuple[torch.Tensor, bool]:
        """``log p(target[i] | .)`` for ``[n, d]`` final hidden states, and whether every target is the argmax.

        Projects, log-softmaxes (float32), gathers and argmaxes one chunk of positions at a time
        (:meth:`_output_rows`), so at most one chunk's ``[rows, vocab]`` logits exist at once, whatever ``n`` is.
        Same arithmetic per position as lm-eval's ``hf`` model (log_softmax, then gather).
        """
        n = hidden.shape[0]
        tok_lp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        greedy = True
        step = self._output_rows()
        for s in range(0, n, step):
            logits = self.model.output(hidden[s : s + step]).float()
            t = target[s : s + step]
            greedy = greedy and bool((logits.argmax(dim=-1) == t).all())
            tok_lp[s : s + step] = F.log_softmax(logits, dim=-1).gather(1, t[:, None])[:, 0]
            del logits
        return tok_lp, greedy

    @torch.no_grad()
    def _forward_hidden(self, batch: torch.Tensor) -> torch.Tensor:
        """Causal forward of right-padded ``[b, s]`` token ids -> ``[b, s, d]`` final hidden states."""
        with self._hidden_output():
            return self.model(batch.to(self.device))

    @torch.no_grad()
    def next_token_logprobs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Full next-token distributions: ``[len(token_ids), vocab]`` float32 log-probabilities, row ``i`` being
        ``log p(. | token_ids[: i + 1])``. The input is used as is (no BOS is added)."""
        ids = list(token_ids)
        self._check_length(len(ids), "next_token_logprobs")
        hidden = self._forward_hidden(torch.tensor([ids], dtype=torch.long))[0]
        return self._logprobs_from_hidden(hidden)

    def logits_fn(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [b, s] -> logits [b, s, vocab]`` (float32): the callable the metrics in
        ``torchtune_longshort.metrics`` take."""
        with torch.no_grad():
            hidden = self._forward_hidden(tokens)
            b, s, d = hidden.shape
            flat = hidden.reshape(b * s, d)
            step = self._output_rows()
            chunks = [self.model.output(flat[i : i + step]).float() for i in range(0, b * s, step)]
            return torch.cat(chunks, dim=0).reshape(b, s, -1)

    def last_logits_fn(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [b, s] -> logits [b, 1, vocab]`` (float32) of the last position only: all that the suffix
        misalignment (next-token distributions after a context) needs, without a ``[b, s, vocab]`` tensor."""
        with torch.no_grad():
            hidden = self._forward_hidden(tokens)
            return self.model.output(hidden[:, -1:]).float()

    def _check_length(self, n_tokens: int, what: str) -> None:
        if n_tokens > self.run_limit:
            raise _TooLong(n_tokens, self.run_limit, what)

    def _too_long_reason(self, err: "_TooLong") -> str:
        fixes = []
        if err.n_tokens > self._max_length:
            fixes.append(f"raise max_length (now {self._max_length})")
        if n_over_usable(err.n_tokens, self.usable_length) and not self.allow_extrapolation:
            fixes.append("pass rope=<method>,rope_factor=<f> to scale RoPE, or allow_extrapolation=true")
        return (
            f"a {err.what} request needs {err.n_tokens} tokens but this model runs at most {err.limit} "
            f"(max_length={self._max_length}, positions covered={self.usable_length}): refused, scored NaN. "
            f"Fix: {'; '.join(fixes)}"
        )

    def _refuse(self, task: Optional[str], err: Union["_TooLong", str], kind: str = "") -> str:
        """Log a refused request (once per task and ``kind``) and return the reason its result carries."""
        reason = err if isinstance(err, str) else self._too_long_reason(err)
        reason = f"{task or '?'}: {reason}"
        key = (task or "?", kind or (err if isinstance(err, str) else err.what))
        self._refused[key] += 1
        if self._refused[key] == 1:
            logger.error("%s. Further such requests of this task are refused silently; the rest of the run goes on.",
                         reason)
        return reason

    def _cut_policy(self, doc: Optional[Dict[str, Any]]) -> Tuple[str, str]:
        """``(policy, who decided)``: the task's declared truncation, else this model's ``truncation``."""
        declared = declared_truncation(doc)
        if declared is not None:
            return declared, "declared by the task"
        return self.truncation, f"model_args truncation={self.truncation}"

    def _no_cut_reason(self, n_tokens: int, budget: int, what: str, who: str) -> str:
        return (
            f"a {what} prompt of {n_tokens} tokens is longer than the {budget} this model can take "
            f"(max_length={self._max_length}{', less the generation budget' if what == 'generate_until' else ''}) "
            f"and may not be cut (truncation=none, {who}): refused, scored NaN. Fix: raise max_length "
            "(with rope=<method>,rope_factor=<f> past the trained positions); cutting is for tasks whose "
            "benchmark protocol declares it"
        )

    # ------------------------------------------------------------------ loglikelihood
    @torch.no_grad()
    def _loglikelihood_tokens(
        self,
        requests: List[Tuple[Tuple[str, str], List[int], List[int]]],
        disable_tqdm: bool = False,
        override_bs: Optional[int] = None,
        task_names: Optional[List[Optional[str]]] = None,
        docs: Optional[List[Optional[Dict[str, Any]]]] = None,
    ) -> List[Tuple[float, bool]]:
        """Score continuation tokens given context tokens, batched (longest first, right-padded).

        A context+continuation longer than ``max_length + 1`` tokens loses context tokens (left or middle) only
        when the request's task declares that truncation (its doc) or ``truncation`` allows it; otherwise, and
        for a continuation longer than ``max_length``, the result is ``(nan, False)`` with the reason.
        """
        task_names = task_names or [None] * len(requests)
        docs = docs or [None] * len(requests)
        indexed = list(zip(range(len(requests)), requests, task_names, docs))
        results: List[Optional[TokenLoglikelihood]] = [None] * len(requests)

        prepared = []
        for i, (_, ctx, cont), task, doc in indexed:
            if len(ctx) == 0 or len(cont) == 0:
                raise ValueError(f"request {i}: empty context or continuation tokens (context={ctx}, cont={cont})")
            if len(cont) > self._max_length:
                reason = self._refuse(task, _TooLong(len(cont), self._max_length, "loglikelihood continuation"))
                results[i] = TokenLoglikelihood.refused(reason)
                continue
            whole = ctx + cont
            if len(whole) > self._max_length + 1:
                budget_ctx = self._max_length + 1 - len(cont)
                policy, who = self._cut_policy(doc)
                if policy == "none":
                    reason = self._refuse(task, self._no_cut_reason(len(whole) - 1, self._max_length, "loglikelihood", who),
                                         "no cut")
                    results[i] = TokenLoglikelihood.refused(reason)
                    continue
                whole = truncate_tokens(ctx, budget_ctx, policy) + cont
            inp = whole[:-1]
            try:
                self._check_length(len(inp), "loglikelihood")
            except _TooLong as err:
                results[i] = TokenLoglikelihood.refused(self._refuse(task, err))
                continue
            prepared.append((i, inp, cont))

        prepared.sort(key=lambda r: (-len(r[1]), r[1]))
        bs = override_bs or self._batch_size
        pbar = tqdm(total=len(prepared), disable=disable_tqdm, desc="longshort loglikelihood")
        pad = self.tokenizer.pad_id
        for s in range(0, len(prepared), bs):
            chunk = prepared[s : s + bs]
            width = max(len(inp) for _, inp, _ in chunk)
            batch = torch.full((len(chunk), width), pad, dtype=torch.long)
            for row, (_, inp, _) in enumerate(chunk):
                batch[row, : len(inp)] = torch.tensor(inp, dtype=torch.long)
            hidden = self._forward_hidden(batch)
            for row, (i, inp, cont) in enumerate(chunk):
                n = len(cont)
                target = torch.tensor(cont, dtype=torch.long, device=hidden.device)
                tok_lp, greedy = self._target_logprobs(hidden[row, len(inp) - n : len(inp)], target)
                results[i] = TokenLoglikelihood(float(tok_lp.double().sum()), greedy, tok_lp.tolist())
            pbar.update(len(chunk))
        pbar.close()
        return results  # type: ignore[return-value]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> List[Tuple[float, bool]]:
        """lm-eval ``loglikelihood``: TemplateLM's encoding (same as ``hf``), then batched scoring."""
        new_reqs = []
        for context, continuation in [req.args for req in requests]:
            if context == "":
                cont_enc = self.tok_encode(continuation, add_special_tokens=False)
                ctx_enc, cont_enc = (
                    ([self.prefix_token_id], cont_enc)
                    if self.prefix_token_id != cont_enc[0]
                    else (cont_enc[:1], cont_enc[1:])
                )
            else:
                ctx_enc, cont_enc = self._encode_pair(context, continuation)
            new_reqs.append(((context, continuation), ctx_enc, cont_enc))
        out = self._loglikelihood_tokens(
            new_reqs,
            disable_tqdm=disable_tqdm,
            task_names=[getattr(r, "task_name", None) for r in requests],
            docs=[getattr(r, "doc", None) for r in requests],
        )
        for req, res in zip(requests, out):
            self.cache_hook.add_partial("loglikelihood", req.args, res)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> List[float]:
        """lm-eval ``loglikelihood_rolling``: disjoint windows of ``max_length`` tokens, exactly as ``hf`` builds
        them (BOS-prefixed token list, prefix token BOS), scored with batching across windows."""
        windows, owners, tasks = [], [], []
        for idx, req in enumerate(requests):
            (string,) = req.args
            for w in map(
                lm_utils.make_disjoint_window,
                lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self._max_length,
                    context_len=1,
                ),
            ):
                windows.append((None,) + w)
                owners.append(idx)
                tasks.append(getattr(req, "task_name", None))
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm, task_names=tasks)
        totals = [0.0] * len(requests)
        for idx, sc in zip(owners, scores):
            totals[idx] += sc[0]
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def greedy_generate(
        self, prompts: List[List[int]], max_new_tokens: int, stop: Sequence[str] = ()
    ) -> List[List[int]]:
        """Greedy decoding with torchtune's KV cache for a batch of (left-padded) prompts.

        Stops a row at EOS or once its decoded text contains a ``stop`` string; returns the generated ids per row
        (EOS excluded). Positions and attention masks skip the left padding, as torchtune's ``generate`` does.
        """
        from torchtune.generation import get_position_ids_from_padding_mask
        from torchtune.modules.common_utils import local_kv_cache

        bsz = len(prompts)
        plen = max(len(p) for p in prompts)
        total = plen + max_new_tokens
        pad = self.tokenizer.pad_id
        tokens = torch.full((bsz, plen), pad, dtype=torch.long)
        valid = torch.zeros((bsz, total), dtype=torch.bool)
        for r, p in enumerate(prompts):
            tokens[r, plen - len(p) :] = torch.tensor(p, dtype=torch.long)
            valid[r, plen - len(p) :] = True
        input_pos = get_position_ids_from_padding_mask(valid).to(self.device)
        valid = valid.to(self.device)
        tokens = tokens.to(self.device)
        ar = torch.arange(total, device=self.device)

        def mask_rows(start: int, end: int) -> torch.Tensor:
            # [b, end-start, total]: causal, padding keys hidden; a row always sees itself (no empty softmax).
            q = ar[start:end]
            m = (ar[None, :] <= q[:, None])[None] & valid[:, None, :]
            m[:, torch.arange(end - start), q] = True
            return m

        out: List[List[int]] = [[] for _ in range(bsz)]
        done = torch.zeros(bsz, dtype=torch.bool)
        with local_kv_cache(
            self.model, batch_size=bsz, device=self.device, dtype=self.dtype, decoder_max_seq_len=total
        ):
            last = None
            for s in range(0, plen, _PREFILL_CHUNK):
                e = min(plen, s + _PREFILL_CHUNK)
                with self._hidden_output():
                    h = self.model(tokens[:, s:e], input_pos=input_pos[:, s:e], mask=mask_rows(s, e))
                last = h[:, -1]
            for step in range(max_new_tokens):
                nxt = self.model.output(last).float().argmax(dim=-1)
                for r in range(bsz):
                    if done[r]:
                        continue
                    t = int(nxt[r])
                    if t == self.eot_token_id:
                        done[r] = True
                        continue
                    out[r].append(t)
                    if stop and any(x and x in self.tok_decode(out[r]) for x in stop):
                        done[r] = True
                if bool(done.all()) or step == max_new_tokens - 1:
                    break
                pos = plen + step
                with self._hidden_output():
                    h = self.model(
                        nxt[:, None], input_pos=input_pos[:, pos : pos + 1], mask=mask_rows(pos, pos + 1)
                    )
                last = h[:, -1]
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        """lm-eval ``generate_until``: greedy only (``do_sample=true`` is refused), batched by identical
        generation kwargs. A prompt longer than ``max_length - max_gen_toks`` tokens is cut (left or middle) only
        when its task declares that truncation (its doc) or ``truncation`` allows it; otherwise, or when
        ``max_gen_toks`` leaves no room for a prompt, the request is refused: an empty :class:`RefusedText`
        carrying the reason, which the task scores NaN."""
        res: List[Optional[str]] = [None] * len(requests)
        eos_text = "</s>"
        groups: Dict[str, List[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            groups[repr(sorted(req.args[1].items(), key=lambda kv: kv[0]))].append(i)
        pbar = tqdm(total=len(requests), disable=disable_tqdm, desc="longshort generate_until")
        for idxs in groups.values():
            gen_kwargs = requests[idxs[0]].args[1]
            kwargs = normalize_gen_kwargs(gen_kwargs, self._max_gen_toks)
            if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
                raise ValueError(
                    f"generation kwargs {gen_kwargs!r}: the longshort model decodes greedily only; "
                    "accepted: do_sample=false / temperature=0"
                )
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            max_gen = int(kwargs.pop("max_gen_toks"))
            budget = self._max_length - max_gen
            encoded = []
            for i in idxs:
                task = getattr(requests[i], "task_name", None)
                if budget < 1:
                    res[i] = RefusedText(self._refuse(
                        task, f"max_gen_toks={max_gen} leaves no room for a prompt in max_length={self._max_length}: "
                        "refused, scored NaN. Fix: raise max_length (with rope=<method>,rope_factor=<f> past the "
                        "trained positions)", "no room"))
                    pbar.update(1)
                    continue
                enc = self.tok_encode(requests[i].args[0])
                if len(enc) > budget:
                    policy, who = self._cut_policy(getattr(requests[i], "doc", None))
                    if policy == "none":
                        res[i] = RefusedText(
                            self._refuse(task, self._no_cut_reason(len(enc), budget, "generate_until", who), "no cut"))
                        pbar.update(1)
                        continue
                    enc = truncate_tokens(enc, budget, policy)
                try:
                    self._check_length(len(enc) + max_gen, "generate_until")
                except _TooLong as err:
                    res[i] = RefusedText(self._refuse(task, err))
                    pbar.update(1)
                    continue
                encoded.append((i, enc))
            encoded.sort(key=lambda r: -len(r[1]))
            for s in range(0, len(encoded), self._batch_size):
                chunk = encoded[s : s + self._batch_size]
                gens = self.greedy_generate([e for _, e in chunk], max_gen, stop=until)
                for (i, _), g in zip(chunk, gens):
                    text = postprocess_generated_text(self.tok_decode(g), stop=until, think_end_token=None)
                    res[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                pbar.update(len(chunk))
        pbar.close()
        return res  # type: ignore[return-value]

    # ------------------------------------------------------------------ misalignment (paper Eq. 4)
    def next_token_divergence(self, requests, disable_tqdm: bool = False) -> List[Dict[str, float]]:
        """Requests ``(text, {"l1": int, "l2": int, "divergences": [...]})``: divergences between the next-token
        distributions after the last ``l1`` and the last ``l2`` tokens of ``text`` (encoded without BOS), via
        ``torchtune_longshort.metrics.suffix_misalignment``. A text shorter than ``max(l1, l2)`` tokens or longer
        than the model can run gets NaN values and an error message."""
        from torchtune_longshort.loss.divergences import DIVERGENCES
        from torchtune_longshort.metrics.misalignment import suffix_misalignment

        out: List[Dict[str, float]] = []
        for req in tqdm(requests, disable=disable_tqdm, desc="longshort next_token_divergence"):
            text, params = req.args
            l1, l2 = int(params["l1"]), int(params["l2"])
            divs = tuple(params.get("divergences", DIVERGENCES))
            ids = self.tokenizer.encode(text, add_bos=False, add_eos=False)
            need = max(l1, l2)
            task = getattr(req, "task_name", None)
            if len(ids) < need:
                reason = self._refuse(task, f"a text of {len(ids)} tokens is shorter than the suffix length {need}: "
                                            "scored NaN", "short text")
                out.append(RefusedScores(divs, reason))
                continue
            try:
                self._check_length(need, "next_token_divergence")
            except _TooLong as err:
                out.append(RefusedScores(divs, self._refuse(task, err)))
                continue
            tokens = torch.tensor(ids[-need:], dtype=torch.long, device=self.device)
            out.append(suffix_misalignment(self.last_logits_fn, tokens, l1, l2, divergences=divs))
        return out


class _TooLong(Exception):
    def __init__(self, n_tokens: int, limit: int, what: str):
        super().__init__(f"{what}: {n_tokens} tokens > {limit}")
        self.n_tokens, self.limit, self.what = n_tokens, limit, what


def n_over_usable(n_tokens: int, usable: int) -> bool:
    """True when ``n_tokens`` lies past the positions the model covers (the fix is RoPE scaling, not max_length)."""
    return n_tokens > usable
