"""The paper's synthetic length-generalization experiments (Du et al., ICML 2025, Sec. 3, App. B, C.1, G) and
sparsity probes beyond the paper (Golowich et al. 2025), all plain PyTorch (RoPE from torchtune, imported lazily).

Run ``python -m torchtune_longshort.synthetic --help``. Modules: ``tasks`` (generators), ``outrep`` (target
reparameterizations), ``models`` (tiny transformer with NoPE/learned/ALiBi/RoPE, App. C.1 linear attention),
``train`` (one run), ``theory`` (closed forms), ``misalignment`` (scalar long-short misalignment), ``experiments``
(figures); beyond the paper: the subpackage ``sparsity_probes`` (sparse parity, k-sparse planted correlations,
parity with a scratchpad, their position-id schemes and their figures).
"""

from torchtune_longshort.refusals import stopped_while_importing

PROG = "python -m torchtune_longshort.synthetic"  # the command of this package's __main__

with stopped_while_importing(__name__):  # `python -m` imports this package first (torch: seconds)
    from .outrep import OUTREPS, get_outrep
    from .tasks import TASKS, make_batch
    from .train import RunConfig, train_run

__all__ = ["OUTREPS", "TASKS", "RunConfig", "get_outrep", "make_batch", "train_run"]
