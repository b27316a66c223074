"""lm-eval hooks of the long_ppl task; the logic lives in ``torchtune_longshort.eval.long_ppl``."""

from torchtune_longshort.eval.length_swept_task import LengthSweptTask  # noqa: F401
from torchtune_longshort.eval.long_ppl import (  # noqa: F401
    agg_curve_mean_nll,
    agg_ppl,
    agg_token_nll,
    long_ppl_dataset,
    process_results,
)
