"""Host-device syncs per training step and per lm-eval call, counted on a CPU.

On a GPU every host read of a device value stalls the queue until the kernels before it have run: ``.item()``,
``int(t)``, ``float(t)``, ``bool(t)`` (each one ``aten._local_scalar_dense``), ``.tolist()`` / ``.cpu()`` /
``.numpy()`` (a device-to-host copy), and the ops whose output shape depends on the values (``nonzero``,
``masked_select``, boolean-mask indexing, ``unique``, ``repeat_interleave`` without ``output_size``). This script
counts them on a CPU with a ``TorchDispatchMode`` (the aten ops) and a ``TorchFunctionMode`` (the copies to the host,
which a CPU tensor makes without dispatching), each charged to the ``torchtune_longshort/`` source line that caused it
(the innermost package frame of the Python stack; ``(outside)`` when none).

On a CPU every tensor is a host tensor: :class:`SyncCounter` tracks from the start which ones a GPU run would hold
on the device, and counts only reads of those (AdamW's step counters and the data loader's draws stay on the host
there too). ``--detail`` prints every source line with its count.

Cases: (a) one step of the recipe's training loop (its step, logging and stop-signal check; after one warm-up step;
not the final save) on ``configs/tiny/longshort_from_checkpoint.yaml`` with a random checkpoint of the stdlib tiny
config's dimensions, ``seq_len`` 64: alpha 0.1 and 0, full and LoRA, RoPE default / YaRN / CLEX, 4 micro-batches,
YaRN at PoSE's position ids; (b) the ``longshort`` lm-eval model on the same checkpoint: one ``loglikelihood``
batch of 4 and one ``generate_until`` call (4 prompts, 16 tokens); (c) ``torchrun``: the step of (a) in 2 processes
(FSDP2 over gloo, torchrun's environment), its device reads and its ``torch.distributed.all_reduce`` calls (the
logged values' mean over ranks and the stop-signal check; FSDP2's own collectives are not counted).

    python benchmarks/host_syncs.py [--detail] [--cases train,torchrun,eval]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import tempfile
import traceback
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import names_from  # noqa: E402  (benchmarks/: not a package)

REPO = Path(__file__).resolve().parents[1]
PACKAGE = os.sep + "torchtune_longshort" + os.sep

# aten ops that read a value back (item/int/float/bool) or whose output shape depends on the values
SYNC_OPS = {"_local_scalar_dense", "nonzero", "nonzero_static", "masked_select", "_unique", "_unique2",
            "unique_dim", "unique_consecutive", "repeat_interleave", "argwhere", "equal", "is_nonzero"}
# Python-level tensor methods that copy to the host (on a CPU they dispatch nothing)
HOST_COPIES = {"tolist", "numpy", "cpu"}


def _where(skip: int = 3) -> str:
    """The innermost ``torchtune_longshort`` frame of the stack, as ``file:line (function)``, and the innermost
    frame outside torch (``via ...``) where that is another package's (torchtune's)."""
    frames = [f for f in traceback.extract_stack()[:-skip] if os.sep + "torch" + os.sep not in f.filename]
    via = ""
    for frame in reversed(frames):
        if PACKAGE in frame.filename:
            rel = frame.filename.split(PACKAGE, 1)[1]
            return f"{rel}:{frame.lineno} ({frame.name}){via}"
        if not via and "site-packages" in frame.filename:
            via = f" via {frame.filename.split('site-packages' + os.sep, 1)[1]}:{frame.lineno} ({frame.name})"
    return "(outside)"


class SyncCounter:
    """Counts the syncs a GPU run would make, by ``(op, where)``, while :meth:`counting`.

    On a CPU every tensor is a host tensor; which ones a GPU run would hold on the device is tracked from the start
    (enter this object before the model is built): a tensor is on the device when a factory call named a ``device``
    (not the string ``"cpu"``) or ran under ``with torch.device(...)``, when ``.to(...)`` named a device (not
    ``"cpu"``), or when an op had a device tensor among its inputs; ``.cpu()``, ``.numpy()`` and ``.tolist()`` give
    host values. A read of a host tensor (the optimizer's step counters, the data loader's draws) is no sync and is
    not counted.
    """

    def __init__(self):
        self.counts = collections.Counter()
        self.on_device = WeakIdKeyDictionary()
        self.active = False
        self._modes = (_Residence(self), _Reads(self))

    def __enter__(self):
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc):
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    @contextlib.contextmanager
    def counting(self):
        """Count the syncs of the block (a fresh count)."""
        self.counts.clear()
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def watch(self, model: torch.nn.Module) -> None:
        """``model``'s parameters and their gradients are device tensors, whatever built them."""
        for p in model.parameters():
            self.on_device[p] = True
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(lambda q: self.mark(q.grad, True))

    def device_input(self, args, kwargs) -> bool:
        return any(isinstance(t, torch.Tensor) and t in self.on_device for t in tree_leaves((args, kwargs)))

    def mark(self, out, device: bool) -> None:
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                if device:
                    self.on_device[t] = True
                else:
                    self.on_device.pop(t, None)

    def note(self, op: str) -> None:
        if self.active:
            self.counts[(op, _where())] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class _Residence(TorchFunctionMode):
    """Python-level calls: a ``device`` argument places the result; ``tolist`` / ``numpy`` / ``cpu`` read a
    device tensor back."""

    def __init__(self, counter: SyncCounter):
        super().__init__()
        self.c = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in HOST_COPIES and args and isinstance(args[0], torch.Tensor) and args[0] in self.c.on_device:
            self.c.note(name)
        out = func(*args, **kwargs)
        if name in HOST_COPIES:
            self.c.mark(out, False)
        elif name == "to":
            target = kwargs.get("device", next((a for a in args[1:] if isinstance(a, (str, torch.device))), None))
            if target is not None:
                self.c.mark(out, target != "cpu")
        elif kwargs.get("device") is not None:
            self.c.mark(out, kwargs["device"] != "cpu")
        return out


class _Reads(TorchDispatchMode):
    """aten ops: a device input makes a device output; :data:`SYNC_OPS` on a device input are counted."""

    def __init__(self, counter: SyncCounter):
        super().__init__()
        self.c = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = self.c.device_input(args, kwargs)
        if device and func._overloadpacket.__name__ in SYNC_OPS:
            self.c.note(func._overloadpacket.__name__)
        out = func(*args, **kwargs)
        if device:
            self.c.mark(out, True)
        return out


# ----------------------------------------------------------------------------- the tiny checkpoint
def tiny_checkpoint(root: Path):
    """A random Llama-2-shaped checkpoint with the tiny config's dimensions (4 layers, width 128, 4 heads, 2 KV
    heads, vocabulary 512, 512 positions) and a SentencePiece tokenizer for it: ``(checkpoint folder, tokenizer
    folder)``."""
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
    from torchtune_longshort.data.tokenizer_training import train_sentencepiece
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    tok = root / "tok"
    train_sentencepiece(iter_stdlib_documents(limit=80, include_tests=False), tok, vocab_size=512)
    ckpt = write_random_llama2_checkpoint(root / "ckpt", vocab_size=512, embed_dim=128, num_layers=4, num_heads=4,
                                          num_kv_heads=2, intermediate_dim=344, max_seq_len=512, seed=0)
    return Path(ckpt), tok


# ----------------------------------------------------------------------------- (a) the recipe
def train_cfg(ckpt: Path, tok: Path, out: Path, alpha: float = 0.1, lora: bool = False, rope: str = "default",
              **over):
    """configs/tiny/longshort_from_checkpoint.yaml on ``ckpt``: ``seq_len`` 64, 4 sequences a step, no validation,
    no saves; ``lora``: rank-4 adapters on q and v; ``rope``: the 512 positions taken as 128 scaled by that method
    (``"<method>+pose"``: and PoSE's position ids up to 512)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(REPO / "configs" / "tiny" / "longshort_from_checkpoint.yaml")
    cfg.checkpoint_dir, cfg.output_dir = str(ckpt), str(out)
    cfg.tokenizer.path = str(tok / "tokenizer.model")
    cfg.validation = None
    cfg.seq_len, cfg.batch_size, cfg.max_steps, cfg.save_every_n_steps = 64, 4, 8, 10**6
    cfg.loss.alpha = alpha
    cfg.lr_scheduler.num_warmup_steps = 0
    if lora:
        cfg.model.lora_attn_modules, cfg.model.lora_rank, cfg.model.lora_alpha = ["q_proj", "v_proj"], 4, 8
    if rope.endswith("+pose"):  # PoSE's position ids (up to 512) instead of 0..63
        rope = rope[:-len("+pose")]
        cfg.position_sampler = {"_component_": "torchtune_longshort.rope.PoSEPositions", "target_len": 512}
    if rope != "default":
        cfg.model = {"_component_": "torchtune_longshort.models.rope_scaled", "method": rope, "max_seq_len": 512,
                     "original_max_seq_len": 128, "model": OmegaConf.to_container(cfg.model)}
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg


def train_step_counts(cfg, collectives: collections.Counter = None) -> dict:
    """Syncs of one step of the recipe's training loop (its step, logging, validation, the stop-signal check):
    ``train()`` over 2 steps, counted from step 1's progress-bar advance (the first step warms caches up: RoPE
    tables, memos) to step 2's: step 1's tail (validation, stop-signal check), then step 2 up to its advance.
    ``collectives``: counts the step's ``torch.distributed.all_reduce`` calls too, by source line (under torchrun:
    :func:`distributed_step_counts`)."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    cfg.max_steps = 2
    all_reduce = torch.distributed.all_reduce
    with SyncCounter() as counter:
        def counted_all_reduce(*args, **kwargs):
            if counter.active and collectives is not None:
                collectives[_where(2)] += 1
            return all_reduce(*args, **kwargs)

        torch.distributed.all_reduce = counted_all_reduce
        recipe = LongShortFinetuneRecipe(cfg)
        recipe.setup()
        counter.watch(recipe._model)
        advance = recipe._run_log.advance

        def count_after_first_step():  # one step's cycle: from step 1's advance to step 2's
            advance()
            counter.active = not counter.active

        recipe._run_log.advance = count_after_first_step
        save = recipe.save_checkpoint

        def save_uncounted():  # the last step saves: not a per-step cost
            active, counter.active = counter.active, False
            save()
            counter.active = active

        recipe.save_checkpoint = save_uncounted
        try:
            recipe.train()
        finally:
            counter.active = False
            torch.distributed.all_reduce = all_reduce
            recipe.release_output_dir()
            recipe._run_log.close_loggers()
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    return dict(counter.counts)


def _rank_counts(rank: int, world_size: int, port: int, cfg, results) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    collectives = collections.Counter()
    with contextlib.redirect_stdout(sys.stderr):
        reads = train_step_counts(cfg, collectives)
    results.put((rank, reads, dict(collectives)))
    if torch.distributed.is_initialized():  # as the recipe's own exit does: a process group left to the
        torch.distributed.destroy_process_group()  # interpreter's teardown aborted a rank now and then (SIGABRT)


def distributed_step_counts(cfg, world_size: int = 2) -> list:
    """:func:`train_step_counts` under torchrun's environment: ``world_size`` processes (gloo on this CPU), each
    counting its step's device reads and ``all_reduce`` calls: ``[(reads, all_reduces)]`` by rank."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(_rank_counts, args=(world_size, port, cfg, results), nprocs=world_size, start_method="spawn")
    out = sorted(results.get() for _ in range(world_size))
    return [(reads, collectives) for _, reads, collectives in out]


# ----------------------------------------------------------------------------- (b) the lm-eval model
def eval_counts(ckpt: Path, tok: Path):
    """``{"loglikelihood batch": counter, "generate_until": counter}`` after one warm-up call of each."""
    from lm_eval.api.instance import Instance

    from torchtune_longshort.eval.model.adapter import LongShortLM

    texts = [("def add(a, b):", " return a + b"), ("import os\nimport sys", "\nimport re\nimport json\n"),
             ("The grass is green.", " The sky is blue."), ("class Foo:", "\n    pass")]
    out = {}
    reqs = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(texts)]
    gen = [Instance("generate_until", {}, (t[0], {"max_gen_toks": 16, "until": ["\n\n\n"]}), i)
           for i, t in enumerate(texts)]
    with SyncCounter() as counter:
        lm = LongShortLM(checkpoint_dir=str(ckpt), tokenizer=str(tok), device="cpu", batch_size=4)
        lm.loglikelihood(reqs, disable_tqdm=True)
        with counter.counting():
            lm.loglikelihood(reqs, disable_tqdm=True)
        out["loglikelihood, 1 batch of 4"] = dict(counter.counts)
        lm.generate_until(gen, True)
        with counter.counting():
            lm.generate_until(gen, True)
        out["generate_until, 4 prompts x 16 tokens"] = dict(counter.counts)
    return out


# ----------------------------------------------------------------------------- table
TRAIN_CASES = [(0.1, False, "default", 1), (0.0, False, "default", 1), (0.1, True, "default", 1),
               (0.0, True, "default", 1), (0.1, False, "yarn", 1), (0.1, False, "clex", 1), (0.1, False, "default", 4),
               (0.1, False, "yarn+pose", 1)]


def by_op(counts: dict) -> str:
    """``op n, op n`` of a ``{(op, where): n}``, largest first."""
    ops = collections.Counter()
    for (op, _), n in counts.items():
        ops[op] += n
    return ", ".join(f"{op} {n}" for op, n in ops.most_common())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=names_from("train", "torchrun", "eval"), default="train,torchrun,eval",
                   help="train, torchrun, eval (comma-separated)")
    p.add_argument("--detail", action="store_true", help="every source line with its count, per case")
    args = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rows = []
    # the runs' own prints (the metric logger's) go to stderr with their logs: stdout is the table
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        ckpt, tok = tiny_checkpoint(Path(tmp))
        if "train" in args.cases:
            for i, (alpha, lora, rope, accum) in enumerate(TRAIN_CASES):
                name = f"train step: alpha {alpha}, {'LoRA' if lora else 'full'}, {rope}, {accum} micro-batch(es)"
                cfg = train_cfg(ckpt, tok, Path(tmp) / f"out{i}", alpha, lora, rope, gradient_accumulation_steps=accum)
                rows.append((name, train_step_counts(cfg)))
        if "torchrun" in args.cases:
            cfg = train_cfg(ckpt, tok, Path(tmp) / "out_torchrun")
            reads, collectives = distributed_step_counts(cfg)[0]
            rows.append(("train step, 2 processes (gloo), rank 0: device reads", reads))
            rows.append(("train step, 2 processes (gloo), rank 0: all_reduce calls",
                         {("all_reduce", where): n for where, n in collectives.items()}))
        if "eval" in args.cases:
            rows.extend(eval_counts(ckpt, tok).items())
    width = max(len(n) for n, _ in rows)
    print(f"| {'case':<{width}} | syncs | by op |")
    print(f"|{'-' * (width + 2)}|------:|-------|")
    for name, counts in rows:
        print(f"| {name:<{width}} | {sum(counts.values()):>5} | {by_op(counts)} |")
    if args.detail:
        for name, counts in rows:
            print(f"\n{name}: {sum(counts.values())}")
            for (op, where), n in sorted(counts.items(), key=lambda kv: -kv[1]):
                print(f"  {n:>4}  {op:<20} {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
