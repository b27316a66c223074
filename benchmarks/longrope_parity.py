"""LongRoPE parity with transformers on both sides of the switch length: prints a table of max |difference|.

A random Phi-3.5-layout model (config.json as Phi-3.5-mini's hub file spells it: ``rope_scaling: {type: longrope,
short_factor, long_factor}``, ``original_max_position_embeddings`` L at the top level) is built by transformers
(``Phi3ForCausalLM``, q/k sharpened so that attention depends on position), loaded with
``torchtune_longshort.models.load_hf_checkpoint`` and compared at sequence lengths below, at (short factors: the
switch is strict), just past and well past L:

* cos/sin: our ``LongRoPE.cos_sin`` against transformers' ``Phi3RotaryEmbedding``;
* logits: our torchtune model against ``Phi3ForCausalLM`` on the same weights;
* reloaded: our folder written by ``save_hf_checkpoint`` and read back by ``Phi3ForCausalLM``, against our model;
* switch: for scale, how far transformers' own logits of the first L tokens move when the call is one token longer.

    python benchmarks/longrope_parity.py                      # head_dim 16, L 64, 256 positions
    python benchmarks/longrope_parity.py --hidden 384 --heads 4 --original 512 --positions 4096
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import positive_int  # noqa: E402  (benchmarks/: not a package)


def factor_lists(n: int, s: float):
    """Short factors rising to 1.5, long ones rising geometrically to 2 s (the shape of Phi-3.5's lists)."""
    short = [1.0 + 0.5 * (i / (n - 1)) ** 2 for i in range(n)]
    long = [(2 * s) ** (i / (n - 1)) for i in range(n)]
    return short, long


def hub_config(args) -> dict:
    head_dim = args.hidden // args.heads
    short, long = factor_lists(head_dim // 2, args.positions / args.original)
    return {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": args.vocab,
            "hidden_size": args.hidden, "intermediate_size": 2 * args.hidden, "num_hidden_layers": 2,
            "num_attention_heads": args.heads, "num_key_value_heads": args.heads // 2,
            "max_position_embeddings": args.positions, "original_max_position_embeddings": args.original,
            "rope_theta": 10000.0, "rope_scaling": {"long_factor": long, "short_factor": short, "type": "longrope"},
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "tie_word_embeddings": False}


def write_checkpoint(folder: Path, config: dict, tokenizer: Path, qk_gain: float = 6.0):
    from transformers import Phi3Config, Phi3ForCausalLM

    for f in tokenizer.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    torch.manual_seed(0)
    hf = Phi3ForCausalLM(Phi3Config(**config)).eval()
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    q_and_k = config["hidden_size"] + config["num_key_value_heads"] * head_dim
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.qkv_proj.weight[:q_and_k].mul_(qk_gain)
    hf.save_pretrained(str(folder))
    saved = json.loads((folder / "config.json").read_text())  # back to the hub spelling
    saved.pop("rope_parameters")
    saved.update(rope_theta=config["rope_theta"], rope_scaling=config["rope_scaling"])
    (folder / "config.json").write_text(json.dumps(saved, indent=2))
    return hf


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=positive_int, default=64)
    ap.add_argument("--heads", type=positive_int, default=4)
    ap.add_argument("--original", type=positive_int, default=64, help="original_max_position_embeddings L (the switch)")
    ap.add_argument("--positions", type=positive_int, default=256, help="max_position_embeddings")
    ap.add_argument("--vocab", type=positive_int, default=512)
    args = ap.parse_args(argv)

    from transformers import Phi3Config, Phi3ForCausalLM
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
    from torchtune_longshort.data.tokenizer_training import train_sentencepiece
    from torchtune_longshort.models import load_hf_checkpoint, save_hf_checkpoint

    config = hub_config(args)
    L, n_max = args.original, args.positions
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train_sentencepiece(iter_stdlib_documents(limit=80, include_tests=False), tmp / "tok", vocab_size=args.vocab)
        (tmp / "src").mkdir()
        hf = write_checkpoint(tmp / "src", config, tmp / "tok")
        ours = load_hf_checkpoint(tmp / "src")
        saved = Phi3ForCausalLM.from_pretrained(str(save_hf_checkpoint(ours, tmp / "out", tmp / "src")),
                                                dtype=torch.float32).eval()
        rope, rotary = ours.layers[0].attn.pos_embeddings, Phi3RotaryEmbedding(Phi3Config(**config))
        half = rope.dim // 2
        tokens = torch.randint(0, args.vocab, (2, n_max), generator=torch.Generator().manual_seed(1))
        print(f"LongRoPE vs transformers {__import__('transformers').__version__} Phi3ForCausalLM: head_dim "
              f"{rope.dim}, L = {L}, {n_max} positions, attention factor {rope.attention_scaling:.6f} "
              f"(transformers {rotary.attention_scaling:.6f}); max |difference|, float32")
        print(f"{'tokens':>7} {'factors':>8} {'cos/sin':>10} {'logits':>10} {'reloaded':>10} {'switch':>10}")
        at_switch = None
        with torch.no_grad():
            for n in (L - 1, L, L + 1, n_max):
                pos = torch.arange(n)[None]
                cos, sin = rotary(torch.zeros(1), pos)
                ref_cos, ref_sin = cos[..., None, :half], sin[..., None, :half]
                got_cos, got_sin = rope.cos_sin(n, pos)
                trig = max((got_cos - ref_cos).abs().max().item(), (got_sin - ref_sin).abs().max().item())
                ref = hf(tokens[:, :n]).logits
                got = ours(tokens[:, :n])
                logit = (got - ref).abs().max().item()
                back = (saved(tokens[:, :n]).logits - got).abs().max().item()
                switch = "" if at_switch is None or n != L + 1 else f"{(ref[:, :L] - at_switch).abs().max():.3g}"
                at_switch = ref if n == L else at_switch
                print(f"{n:>7} {'long' if n > L else 'short':>8} {trig:>10.3g} {logit:>10.3g} {back:>10.3g} "
                      f"{switch:>10}")


if __name__ == "__main__":
    main()
