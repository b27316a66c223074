"""The paper's comparison end to end: base model, RoPE x alpha x seed fine-tunes, lm-eval, report.

``python -m torchtune_longshort.study --config study/cpu_small.yaml [--quick] [--out DIR]``
"""

from torchtune_longshort.refusals import stopped_while_importing

with stopped_while_importing(__name__):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort.eval.tasks.common.lengths import length_label
    from torchtune_longshort.study.config import StudyConfig, StudyConfigError
    from torchtune_longshort.study.load import load_study_config
    from torchtune_longshort.study.runner import Study

__all__ = ["Study", "StudyConfig", "StudyConfigError", "length_label", "load_study_config"]
