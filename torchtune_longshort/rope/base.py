"""The common frame of every RoPE scaling method: a drop-in for torchtune's ``RotaryPositionalEmbeddings``.

A method only says how it computes its inverse frequencies (and, for YaRN, a cos/sin multiplier); this
module owns the cos/sin cache, the rotation in either pairing layout, the meta-device protocol of torchtune
(``rope_init`` after ``to_empty``) and the error raised when a position lies past the cache.

Pure PyTorch: nothing here imports torchtune.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Iterator, List, Optional, Tuple

import torch
from torch import nn

from torchtune_longshort.devices import check_fits
from torchtune_longshort.rope.checks import check_base, check_factor, check_head_dim, check_positive_int
from torchtune_longshort.rope.learned_settings import LearnedSettingsRule

LAYOUTS = ("interleaved", "half")


def default_inv_freq(dim: int, base: float, device=None) -> torch.Tensor:
    """Plain RoPE inverse frequencies ``base ** (-2i / dim)``, i = 0 .. dim/2 - 1, in float32 (Su et al. 2021)."""
    exponent = torch.arange(0, dim, 2, device=device, dtype=torch.int64).float() / dim
    return 1.0 / (base**exponent)


def rope_table_bytes(max_seq_len: int, head_dim: int) -> int:
    """Peak bytes of building a float32 (cos, sin) table of ``max_seq_len`` positions for ``head_dim``: the angles,
    their cos and sin, and the stacked table (about 10 bytes per position and head dimension), as torchtune's
    ``RotaryPositionalEmbeddings`` and :func:`rope_cache` build it."""
    return 4 * max_seq_len * (1 + 5 * (head_dim // 2))


def check_rope_table(max_seq_len: int, head_dim: int, device) -> None:
    """Refuse (``ValueError``) a RoPE table of ``max_seq_len`` positions that ``device``'s free memory cannot hold,
    before it is built (:func:`~torchtune_longshort.devices.check_fits`)."""
    check_fits(rope_table_bytes(max_seq_len, head_dim), device, f"a RoPE table of {max_seq_len:,} positions "
               f"(head_dim {head_dim})", "ask for fewer positions (the run's or the model's length)")


def rope_cache(theta: torch.Tensor, max_seq_len: int, scale: float = 1.0) -> torch.Tensor:
    """[max_seq_len, dim/2, 2] of (cos, sin) of ``position * theta`` times ``scale``, float32; refused when the
    device cannot hold it (:func:`check_rope_table`)."""
    check_rope_table(max_seq_len, 2 * theta.numel(), theta.device)
    positions = torch.arange(max_seq_len, dtype=torch.float32, device=theta.device)
    angles = torch.outer(positions, theta.float())
    return torch.stack([angles.cos() * scale, angles.sin() * scale], dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate ``x`` [b, s, n_h, h_d] by angles whose cos/sin are [b or 1, s, 1, h_d/2] (float32).

    ``interleaved`` pairs dimensions (2i, 2i+1) as Meta's Llama and torchtune's ``RotaryPositionalEmbeddings``;
    ``half`` pairs (i, i + h_d/2) as transformers' ``rotate_half`` and torchtune's Qwen2 RoPE. Computed in
    float32 and cast back to ``x``'s dtype, like torchtune's own module.

    Eager, the interleaved pairs take one complex multiply: the same four products and two sums as the real formula
    (the same bits on a CPU, ``tests/test_rope_formulas.py``) in one kernel instead of six and a stack, 2.5-8x
    faster on a CPU (``benchmarks/rope_rotate_cost.py``). Compiled (inductor fuses it whole), or given cos/sin not in
    float32 (a caller's own: :class:`ScaledRoPE` keeps its cache in float32 through ``model.to``), the real formula.
    """
    xf = x.float()
    if layout == "interleaved" and cos.dtype == sin.dtype == torch.float32 and not torch.compiler.is_compiling():
        xc = torch.view_as_complex(xf.reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(xc * torch.complex(cos, sin)).flatten(3).type_as(x)
    if layout == "interleaved":
        xs = xf.reshape(*x.shape[:-1], -1, 2)
        x0, x1 = xs[..., 0], xs[..., 1]
        out = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).flatten(3)
    else:
        half = x.shape[-1] // 2
        x0, x1 = xf[..., :half], xf[..., half:]
        out = torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return out.type_as(x)


class ScaledRoPE(LearnedSettingsRule, nn.Module):
    """Base class: RoPE whose inverse frequencies come from ``compute_inv_freq`` (one method per subclass).

    Drop-in for torchtune's ``RotaryPositionalEmbeddings``: ``forward(x, *, input_pos=None)`` with ``x`` of shape
    [b, s, n_h, h_d] and ``input_pos`` [b, s] (or None for 0..s-1), ``rope_init()`` (called by torchtune's
    distributed recipes after meta-device init) and ``reset_parameters()``. The cos/sin cache is built for
    ``max_seq_len`` positions; a position at or past it raises ``ValueError`` instead of indexing out of range.

    Args:
        dim: head dimension (positive, even).
        max_seq_len: number of positions the cache covers (the *target* context length).
        base: RoPE base of the pre-trained model.
        layout: ``"interleaved"`` (torchtune Llama/Mistral) or ``"half"`` (torchtune Qwen2).
    """

    method: str = "default"
    # Whether transformers can run this method from config.json alone (rope_theta / rope_scaling). A method that
    # cannot (a learned ODE, a query factor) is saved so that transformers refuses the folder instead of silently
    # loading plain RoPE: see torchtune_longshort.models.hf_rope.
    transformers_representable: bool = True
    # has_learned_parameters, learned_settings and the rule over them: LearnedSettingsRule (rope/learned_settings.py)
    # What the method needs: a context-extension factor (default L'/L) and/or the pre-trained length L.
    has_factor: bool = False
    needs_original_length: bool = False
    # The parameter that says how far the method scales L (None: it scales nothing with the length): ``factor`` for
    # the factor methods, CLEX's ``t_max``; coverage (:meth:`covered_length`) and the eval's hints ask it.
    scale_parameter: Optional[str] = None
    # transformers' ``rope_type`` for this method (``modeling_rope_utils.ROPE_INIT_FUNCTIONS``); None where the
    # method is a ``rope_theta`` change (``hf_theta``) or not representable.
    hf_rope_type: Optional[str] = None
    # Older names of that type that config.json files on the hub still carry (transformers reads them as it).
    hf_rope_type_aliases: Tuple[str, ...] = ()
    # Keys of the ``to_hf`` entry that config.json also holds at its top level, where transformers reads them first
    # (Phi-3's ``original_max_position_embeddings``): written there too, and read from there when present.
    hf_top_level_keys: Tuple[str, ...] = ()
    # What of this method runs outside the recipe's compiled decoder layers (``compile: True``) and why, logged by
    # torchtune_longshort.training.compile_setup; None: all of it runs inside them (cos/sin and the rotation).
    # ``compile_eager_methods``: the methods of the module that compile_setup makes run eager inside the layers.
    compile_note: Optional[str] = None
    compile_eager_methods: Tuple[str, ...] = ()
    # The stream of a method's random training draws (CLEX's t and positions); None: torch's global stream. The
    # recipe sets one seeded generator, the same on every rank, and saves its state with each checkpoint.
    generator: Optional[torch.Generator] = None
    # Whether the rotation depends on the length of the whole sequence, not only on each position (dynamic NTK's
    # base, LongRoPE's factors, CLEX's t). The eval model then batches only sequences of one length (a padded row
    # would take its batch's width), and a prompt prefilled in chunks declares its whole length (sequence_length).
    length_dependent: bool = False
    _sequence_length: Optional[int] = None  # set by sequence_length(): the length of the sequence a call is part of
    _range_memo: Optional[tuple] = None  # (weakref to the last input_pos, its version, (min, max)): position_range

    # --- what a method knows about itself (asked by models/, eval/, study/; nothing else branches on a name) --
    @classmethod
    def default_kwargs(cls, max_seq_len: int, original_max_seq_len: int, given: Optional[dict] = None) -> dict:
        """The method's parameters for a target length L' = ``max_seq_len`` from L = ``original_max_seq_len``:
        ``given`` completed with the method's defaults."""
        out = dict(given or {})
        if cls.has_factor and "factor" not in out:
            factor = max_seq_len / original_max_seq_len
            if factor < 1:
                raise ValueError(
                    f"max_seq_len={max_seq_len} is shorter than original_max_seq_len={original_max_seq_len}: the "
                    f"default factor L'/L={factor:.4g} is < 1; pass factor >= 1 explicitly or a longer max_seq_len"
                )
            out["factor"] = factor
        if cls.needs_original_length:
            out.setdefault("original_max_seq_len", original_max_seq_len)
        return out

    @classmethod
    def covered_length(cls, spec: dict, original_max_seq_len: int) -> Optional[int]:
        """The positions ``spec`` scales L = ``original_max_seq_len`` to, from the parameter that says how far (its
        ``factor``: L * factor), checked as the build checks it; None where the spec names no such parameter (the
        method is then built for the run's length). A method with no factor (plain RoPE, ABF, EABF) scales nothing
        with the length: it covers L."""
        if cls.scale_parameter is None:
            return int(original_max_seq_len)
        if cls.scale_parameter not in spec:
            return None
        return int(round(original_max_seq_len * check_factor("factor", spec["factor"])))

    @classmethod
    def hf_theta(cls, spec: dict) -> float:
        """The ``rope_theta`` config.json gets for ``spec``."""
        return float(spec["base"])

    @classmethod
    def hf_max_position_embeddings(cls, spec: dict) -> int:
        """The ``max_position_embeddings`` config.json gets (transformers reads some methods' L from it)."""
        return int(spec["max_seq_len"])

    @classmethod
    def to_hf(cls, spec: dict) -> Optional[dict]:
        """The transformers ``rope_scaling`` entry for ``spec`` (without ``rope_theta``); None if there is none."""
        return None

    @classmethod
    def from_hf(cls, entry: dict, theta: float, max_position_embeddings: int) -> dict:
        """Inverse of :meth:`to_hf`: a spec from a transformers ``rope_scaling`` entry of ``hf_rope_type``."""
        raise NotImplementedError(f"{cls.__name__} has no transformers rope_type")

    @classmethod
    def check_spec(cls, spec: dict, head_dim: int, where: str = "rope spec") -> None:
        """Refuse a spec (read from a config.json) that cannot build for ``head_dim``, before anything is built;
        ``where`` starts the message. Nothing to check for most methods."""

    def __init__(self, dim: int, max_seq_len: int, base: float = 10_000.0, layout: str = "interleaved") -> None:
        super().__init__()
        self.dim = check_head_dim(dim)
        self.max_seq_len = check_positive_int("max_seq_len", max_seq_len)
        self.base = check_base("base", base)
        if layout not in LAYOUTS:
            raise ValueError(f"layout={layout!r} is not accepted: expected one of {LAYOUTS}")
        self.layout = layout
        self.is_cache_built = False

    # --- what a method defines -------------------------------------------------------------------------
    def compute_inv_freq(self, device=None) -> torch.Tensor:
        """Inverse frequencies [dim/2], float32. Subclasses override."""
        return default_inv_freq(self.dim, self.base, device)

    @property
    def attention_scaling(self) -> float:
        """Multiplier on cos and sin (so on both q and k); 1 except YaRN."""
        return 1.0

    def extra_spec(self) -> dict:
        """Method parameters beyond ``method/head_dim/max_seq_len/base`` (for ``spec()``)."""
        return {}

    def spec(self) -> dict:
        """A JSON-able description: ``{"method", "base", "max_seq_len", **method parameters}``."""
        return {"method": self.method, "base": self.base, "max_seq_len": self.max_seq_len, **self.extra_spec()}

    # --- torchtune protocol ----------------------------------------------------------------------------
    def rope_init(self) -> None:
        """(Re)compute ``theta`` and the cos/sin cache; a no-op beyond registering ``theta`` on the meta device."""
        device = self.theta.device if hasattr(self, "theta") and isinstance(self.theta, torch.Tensor) else None
        if device is not None and device.type == "meta":
            device = None
        theta = self.compute_inv_freq(device=device)
        self.register_buffer("theta", theta, persistent=False)
        if theta.is_meta:
            self.is_cache_built = False
            return
        self.build_rope_cache(self.max_seq_len)
        self.is_cache_built = True

    def reset_parameters(self) -> None:
        self.rope_init()

    def initial_learned_parameters(self) -> dict:
        """``{name: float32 CPU tensor}``: a new run's values of the method's learned parameters, drawn from torch's
        global stream by the method's own rule (the recipe draws them under a seeded, forked stream so that one
        process and several start alike); none for a method without learned parameters."""
        return {}

    def _apply(self, fn, *args, **kwargs):
        # model.to(torch.bfloat16) would cast the cos/sin cache too; angles at long positions need float32
        # (DESIGN: RoPE math in float32), so rebuild it in float32 on the new device.
        out = super()._apply(fn, *args, **kwargs)
        theta = getattr(self, "theta", None)
        if isinstance(theta, torch.Tensor) and not theta.is_meta and (
            theta.dtype != torch.float32 or (self.is_cache_built and self.cache.dtype != torch.float32)
        ):
            self.rope_init()
        return out

    def build_rope_cache(self, max_seq_len: int) -> None:
        """Cache [max_seq_len, dim/2, 2] of (cos, sin) * ``attention_scaling``, float32."""
        self.register_buffer("cache", rope_cache(self.theta, max_seq_len, self.attention_scaling), persistent=False)

    def check_training_length(self, seq_len: int, field: str = "seq_len") -> None:
        """``ValueError`` naming ``field`` when training on ``seq_len`` tokens would reach past this RoPE's positions
        (CLEX's random draw); the recipe's setup asks every method. Nothing to check for most methods."""

    # --- forward -------------------------------------------------------------------------------------------
    def check_positions(self, seq_len: int, input_pos: Optional[torch.Tensor]) -> None:
        """Raise ``ValueError`` when a position is at or past ``max_seq_len`` (the cache length)."""
        if input_pos is None:
            if seq_len > self.max_seq_len:
                raise ValueError(
                    f"sequence length {seq_len} exceeds this RoPE's max_seq_len={self.max_seq_len}: rebuild it for "
                    "the target length (apply_rope_scaling(model, method, max_seq_len=...))"
                )
            return
        if torch.compiler.is_compiling() or input_pos.numel() == 0:
            return
        low, top = self.position_range(input_pos)
        if top >= self.max_seq_len or low < 0:
            raise ValueError(
                f"input_pos spans [{low}, {top}] but this RoPE's cache covers positions 0..{self.max_seq_len - 1} "
                f"(max_seq_len={self.max_seq_len}): rebuild it for the target length"
            )

    def position_range(self, input_pos: torch.Tensor) -> Tuple[int, int]:
        """``(min, max)`` of a non-empty ``input_pos``, read from the device once per tensor: torchtune's decoder
        passes one ``input_pos`` to every layer, whose q and k each ask (two device-to-host syncs per call, so ~4
        per layer on a GPU, where a KV-cached generation step runs every layer for one token). Asked again for
        that same tensor, unchanged since (its in-place version counter), the range read before is returned."""
        memo = self._range_memo
        try:
            version = input_pos._version
        except RuntimeError:  # an inference-mode tensor counts no versions: read it each time
            version = None
        if memo is not None and version is not None and memo[0]() is input_pos and memo[1] == version:
            return memo[2]
        found = _position_range(input_pos)
        self._range_memo = None if version is None else (weakref.ref(input_pos), version, found)
        return found

    def note_position_range(self, input_pos: torch.Tensor, low: int, top: int) -> None:
        """Take ``(low, top)`` as ``input_pos``'s range, read by the caller where the ids were drawn (the host):
        :meth:`position_range` then reads nothing back from the device for that tensor, unchanged since."""
        try:
            self._range_memo = (weakref.ref(input_pos), input_pos._version, (int(low), int(top)))
        except RuntimeError:  # an inference-mode tensor counts no versions: position_range reads it
            self._range_memo = None

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_range_memo", None)  # a weak reference does not pickle (torch.save of a whole model)
        return state

    def cos_sin(self, seq_len: int, input_pos: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [b or 1, s, 1, dim/2] for the positions of this call (float32)."""
        if not self.is_cache_built:
            raise RuntimeError(f"{type(self).__name__}: RoPE cache is not built; call rope_init() first")
        rope_cache = self.cache[:seq_len] if input_pos is None else self.cache[input_pos]
        rope_cache = rope_cache.view(-1, seq_len, 1, self.dim // 2, 2)
        return rope_cache[..., 0], rope_cache[..., 1]

    def forward(self, x: torch.Tensor, *, input_pos: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Apply the rotation to ``x`` [b, s, n_h, h_d]; ``input_pos`` [b, s] or [1, s] position ids, or None."""
        if x.dim() != 4 or x.shape[-1] != self.dim or not x.is_floating_point():
            # a [b, s, h_d] tensor broadcast into a [b, s, s, h_d] result without a word; another head_dim failed
            # in the rotation's arithmetic
            raise ValueError(f"{type(self).__name__}: x has shape {tuple(x.shape)} and dtype {x.dtype}: expected a "
                             f"floating [batch, seq_len, num_heads, head_dim={self.dim}] tensor")
        seq_len = x.size(1)
        self.check_positions(seq_len, input_pos)
        cos, sin = self.cos_sin(seq_len, input_pos)
        return rotate(x, cos, sin, self.layout)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.spec().items())

    # --- generation with a KV cache (asked by eval/model/generation.py) ------------------------------------
    def kv_cache_stale(self, cached: int, length: int) -> bool:
        """Whether the keys cached for the first ``cached`` positions must be recomputed (the cache dropped and the
        whole sequence run again) before the sequence grows to ``length`` positions. False here: cached keys keep
        the rotation they were written with (static methods: it does not change; dynamic NTK and CLEX: by design,
        as transformers' ``generate``). LongRoPE overrides it."""
        return False

    @contextmanager
    def sequence_length(self, length: int) -> Iterator[None]:
        """Within the block, calls are parts of one sequence of ``length`` positions (a prompt prefilled in chunks:
        transformers' one prefill of the whole prompt). A length-dependent method takes ``length`` instead of the
        call's largest position + 1 (:meth:`call_length`); a call reaching past ``length`` is refused."""
        check_positive_int("length", length)
        if length > self.max_seq_len:
            raise ValueError(f"sequence_length({length}) exceeds this RoPE's max_seq_len={self.max_seq_len}: rebuild "
                             "it for the target length")
        previous, self._sequence_length = self._sequence_length, length
        try:
            yield
        finally:
            self._sequence_length = previous

    def declared_length(self, seq_len: int, input_pos: Optional[torch.Tensor]) -> Optional[int]:
        """The length :meth:`sequence_length` declared for this call, or None; a call reaching past it raises
        ``ValueError``."""
        length = self._sequence_length
        if length is not None and not torch.compiler.is_compiling():
            top = seq_len - 1 if input_pos is None else self.position_range(input_pos)[1] if input_pos.numel() else -1
            if top >= length:
                raise ValueError(f"input_pos reaches {top}, past the sequence of {length} positions declared by "
                                 "sequence_length(): declare the whole sequence's length")
        return length

    def call_length(self, seq_len: int, input_pos: Optional[torch.Tensor]) -> int:
        """The sequence length a length-dependent rotation takes for this call: the declared one
        (:meth:`sequence_length`), else the call's largest position + 1 (``seq_len`` without ``input_pos``)."""
        length = self.declared_length(seq_len, input_pos)
        if length is not None:
            return length
        if input_pos is None:
            return seq_len
        return (int(input_pos.max()) if torch.compiler.is_compiling() else self.position_range(input_pos)[1]) + 1


def _position_range(input_pos: torch.Tensor) -> Tuple[int, int]:
    """``(min, max)`` of ``input_pos`` in one device-to-host copy."""
    low, top = torch.aminmax(input_pos)
    return tuple(torch.stack([low, top]).tolist())


def rope_modules(model: nn.Module) -> List[ScaledRoPE]:
    """The distinct RoPE modules of ``model`` (one shared by every layer in torchtune's builders)."""
    return list({id(m): m for m in model.modules() if isinstance(m, ScaledRoPE)}.values())


class DefaultRoPE(ScaledRoPE):
    """Plain RoPE (no scaling), with the length check and both layouts; equals torchtune's module at scale 1."""

    method = "default"

    def __init__(self, dim: int, max_seq_len: int, base: float = 10_000.0, layout: str = "interleaved") -> None:
        super().__init__(dim, max_seq_len, base, layout)
        self.rope_init()
