"""The package's torchtune recipes (``tune run torchtune_longshort/recipes/<name>.py --config ...``)."""
