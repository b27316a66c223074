"""The study's pre-training corpus: the standard library's sources with passkey-retrieval documents mixed in.

A model of a few million parameters pre-trained on code alone never learns the passkey task, so the retrieval
column of a study would be 0 for every checkpoint and say nothing about length generalization. Here every
standard-library document is followed by ``passkeys_per_document`` complete passkey prompts *with their answer*
(``... What is the pass key? The pass key is 51234.``), each fitting ``max_tokens`` tokens: the pre-training length
L0. The prompt is :mod:`torchtune_longshort.eval.tasks.passkey.task`'s own (same instruction, needle, question and
haystack),
so the task the model learns at L0 is exactly the one evaluated at 2-16x L0; only the distance between the needle
and the question grows. Keys are drawn from ``seed`` and never depend on the evaluation's keys.

Use it as a recipe ``dataset``::

    dataset:
      _component_: torchtune_longshort.study.pretrain_mix.stdlib_with_passkeys
      tokenizer_path: ${tokenizer.path}
      max_tokens: 128
"""

from __future__ import annotations

import random
from typing import Iterator, List, Optional

from torchtune_longshort.data.corpus import Documents, stdlib
from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer
from torchtune_longshort.eval.tasks.passkey.task import DEFAULT_DEPTHS, haystack_units, make_passkey_sample
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
from torchtune_longshort.models.tokenizer_formats import has_tokenizer


class PasskeyMix:
    """A re-iterable document source (the ``Documents`` protocol): stdlib documents, each followed by passkey
    documents. Deterministic: the same arguments give the same documents on every call."""

    def __init__(self, base: Documents, tokenizer_path: str, max_tokens: int, passkeys_per_document: int,
                 haystack: str, seed: int):
        if not has_tokenizer(tokenizer_path):
            raise FileNotFoundError(f"tokenizer_path={tokenizer_path!r}: no tokenizer there (the recipe's "
                                    "tokenizer component creates it first; pass ${tokenizer.path})")
        if passkeys_per_document < 0:
            raise ValueError(f"passkeys_per_document={passkeys_per_document} must be >= 0")
        self.base, self.max_tokens, self.k, self.seed = base, int(max_tokens), int(passkeys_per_document), seed
        self.files = getattr(base, "files", None)  # the stdlib files it reads (the recipe compares validation's)
        self.tok = TaskTokenizer(str(tokenizer_path))
        self.units = haystack_units(haystack)
        self.description = (f"{base!r} + {self.k} passkey documents of <= {max_tokens} tokens after each "
                            f"(haystack {haystack}, seed {seed})")
        try:  # refuse now, not at the first document, a length the prompt alone does not fit
            self.passkey_document(random.Random(0))
        except TaskDataError as err:
            raise ValueError(
                f"max_tokens={max_tokens} is too short for this tokenizer's passkey prompt: {err}") from None

    def passkey_document(self, rng: random.Random) -> str:
        """One prompt with its answer, at most ``max_tokens`` tokens (BOS counted), the needle at a random depth."""
        key = rng.randint(10_000, 99_999)
        depth = rng.choice(DEFAULT_DEPTHS)
        # the prompt takes at most max_tokens - GEN_BUDGET tokens; the answer (" 51234.") fits the budget
        sample = make_passkey_sample(self.tok, self.max_tokens, depth, key, self._units(rng))
        return f"{sample.input} {sample.answer}."

    def _units(self, rng: random.Random) -> List[str]:
        start = rng.randrange(max(1, len(self.units) - 64))
        return list(self.units[start:start + 64])

    def __call__(self) -> Iterator[str]:
        rng = random.Random(f"passkey-mix-{self.seed}")
        for doc in self.base():
            yield doc
            for _ in range(self.k):
                yield self.passkey_document(rng)

    def __repr__(self) -> str:
        return f"<documents: {self.description}>"


def stdlib_with_passkeys(tokenizer_path: str, max_tokens: int = 128, passkeys_per_document: int = 8,
                         haystack: str = "filler", seed: int = 0, include_tests: bool = False,
                         min_bytes: int = 0, limit: Optional[int] = None, shuffle_seed: Optional[int] = None,
                         piece_chars: Optional[int] = None, split: Optional[str] = None) -> PasskeyMix:
    """The stdlib corpus (:func:`torchtune_longshort.data.corpus.stdlib`) with passkey documents mixed in.

    Args:
        tokenizer_path: the model's SentencePiece tokenizer (folder or ``tokenizer.model``), to size the prompts.
        max_tokens: longest passkey document in tokens: the pre-training length L0. Prompts are at most
            ``max_tokens - 16`` tokens (the eval task's generation budget), then the answer.
        passkeys_per_document: passkey documents after each stdlib file (~8 x 120 tokens after a file of ~8k).
        haystack: the passkey task's haystack source (``filler``, the task's default, or ``stdlib``).
        seed: draws the keys, depths and haystack windows.
        include_tests, min_bytes, limit, shuffle_seed, piece_chars, split: as for ``stdlib`` (with ``piece_chars``, the
            passkey documents follow each piece instead of each file).
    """
    base = stdlib(min_bytes=min_bytes, include_tests=include_tests, limit=limit, shuffle_seed=shuffle_seed,
                  piece_chars=piece_chars, split=split)
    return PasskeyMix(base, tokenizer_path,
                      max_tokens, passkeys_per_document, haystack, seed)
