"""Beyond the paper: CPU-sized probes of the sparsity theory of length generalization (Golowich et al. 2025).

Modules: ``sparse_parity`` (parity of the ``k`` selected bits among ``l`` index/bit pairs), ``planted_correlations``
(label = sum mod q of ``k`` planted tokens, spread or inside a window), ``scratchpad_parity`` (parity of ``l`` bits
with a running-parity scratchpad), ``positions`` (the position-id schemes they share: plain, PoSE, coupling),
``probe_training`` (model size, budget and training loop they share) and ``figures`` (the ``--figure beyond`` grid:
CSV + PNG + ``beyond_summary.json``).
"""
