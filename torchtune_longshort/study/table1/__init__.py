"""The paper's Table-1 question without training: across training-free RoPE variants of one pre-trained model, does
the long-short misalignment (Eq. 4) predict perplexity and passkey retrieval past the model's context?

``python -m torchtune_longshort.study.table1 --config study/table1_smollm2.yaml [--quick]``: config
(:mod:`.config`), cells through the lm-eval task pack (:mod:`.runner`), Spearman's rho with intervals and verdicts
(:mod:`.analysis`), report (:mod:`.report`) and figure (:mod:`.figure`). docs/study/table1.md describes the design
and the measured time.
"""
