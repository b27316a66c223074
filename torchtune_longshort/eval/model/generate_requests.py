"""lm-eval's ``generate_until`` requests of the ``longshort`` model (:class:`GenerationRequests`, a base of
:class:`~torchtune_longshort.eval.model.adapter.LongShortLM`): greedy decoding only, batched by identical generation
kwargs, a prompt cut only where its task or ``truncation`` allows it, else refused with the reason the task scores NaN.

It reads what the model sets up (``model``, ``tokenizer``, ``args``, ``limits``, ``batches``, ``vocab_size``,
``cache_hook``) and calls its ``tok_encode``, ``tok_decode``, ``_no_bar`` and ``_out_of_memory``; decoding itself is
:mod:`~torchtune_longshort.eval.model.generation`'s.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Sequence

from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from tqdm.auto import tqdm

from torchtune_longshort.eval.model.batch_size import RowMemory
from torchtune_longshort.eval.model.generation import greedy_generate, not_greedy
from torchtune_longshort.eval.tasks.common.unavailable import RefusedText


class GenerationRequests:
    """``generate_until`` and the greedy decoding it runs, for :class:`~.adapter.LongShortLM`."""

    def greedy_generate(
        self, prompts: List[List[int]], max_new_tokens: int, stop: Sequence[str] = ()
    ) -> List[List[int]]:
        """Greedy decoding with torchtune's KV cache for a batch of prompts (token ids): the generated ids per row
        (EOS excluded), a row stopping at EOS or once its decoded text contains a ``stop`` string."""
        return greedy_generate(
            self.model, prompts, max_new_tokens, pad_id=self.tokenizer.pad_id, eos_id=self.eot_token_id,
            decode=self.tok_decode, dtype=self.args.dtype, device=self.device, stop=stop,
        )

    def _generation_prompt(self, request, max_gen: int):
        """``(prompt tokens, None)`` for a request the model runs, else ``(None, RefusedText)``: the prompt cut to
        ``max_length - max_gen`` tokens only where the task or ``truncation`` allows it (:meth:`RequestLimits.fit`)."""
        enc, plan = self.limits.fit(self.tok_encode(request.args[0]), max_gen, "generate_until",
                                    getattr(request, "doc", None))
        if enc is None:
            return None, RefusedText(self.limits.refuse(getattr(request, "task_name", None), plan))
        return enc, None

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        """lm-eval ``generate_until``: greedy only (``do_sample=true`` is refused), batched by identical
        generation kwargs. A prompt longer than ``max_length - max_gen_toks`` tokens is cut (left or middle) only
        when its task declares that truncation (its doc) or ``truncation`` allows it; otherwise, or when
        ``max_gen_toks`` leaves no room for a prompt, the request is refused: an empty :class:`RefusedText`
        carrying the reason, which the task scores NaN."""
        res: List[Optional[str]] = [None] * len(requests)
        groups: Dict[str, List[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            groups[repr(sorted(req.args[1].items(), key=lambda kv: kv[0]))].append(i)
        pbar = tqdm(total=len(requests), disable=self._no_bar(disable_tqdm), desc="longshort generate_until")
        for idxs in groups.values():
            gen_kwargs = requests[idxs[0]].args[1]
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            why = not_greedy(kwargs)  # sampling, beams, penalties, a minimum length: hf's generate honours them
            if why:
                raise ValueError(f"generation kwargs {gen_kwargs!r}: {why}")
            until = handle_stop_sequences(kwargs.pop("until", None), eos=self.tokenizer.token_text(self.eot_token_id))
            max_gen = int(kwargs.pop("max_gen_toks"))
            encoded = []
            for i in idxs:
                enc, res[i] = self._generation_prompt(requests[i], max_gen)
                if enc is None:
                    pbar.update(1)
                else:
                    encoded.append((i, enc))
            encoded.sort(key=lambda r: -len(r[1]))

            def generate(chunk):
                gens = self.greedy_generate([e for _, e in chunk], max_gen, stop=until)
                for (i, _), g in zip(chunk, gens):
                    text = postprocess_generated_text(self.tok_decode(g), stop=until, think_end_token=None)
                    res[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)

            def refuse(item, error):
                i, enc = item
                res[i] = RefusedText(self._out_of_memory(getattr(requests[i], "task_name", None),
                                                         len(enc) + max_gen, error))

            self.batches.run(self.model, encoded, lambda r: len(r[1]) + max_gen, generate, refuse,
                             lambda chunk: pbar.update(len(chunk)), RowMemory.of(self.model, self.vocab_size, True))
        pbar.close()
        return res  # type: ignore[return-value]
