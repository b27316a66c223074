"""The YAML configs shipped with torchtune_longshort (installed as ``torchtune_longshort.configs``; see ``longshort-cp``)."""
