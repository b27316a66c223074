"""The typed-settings kit: a config field declared once (:mod:`.fields`: YAML key, default, doc, check, resume
policy), the value checks the fields use (:mod:`.values`) and the unknown-key refusal with "did you mean"
(:mod:`.unknown_keys`).

A kit on floor 1: it imports only the ground (:mod:`torchtune_longshort.refusals`, ``devices``, ``lengths``). The
recipe's config (:mod:`torchtune_longshort.training.recipe_config`) and the study's configs
(:mod:`torchtune_longshort.study.config`, ``table1.config``) are built with it.
"""
