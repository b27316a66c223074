"""The long-short misalignment metric, paper Eq. 4 (``longshort_misalignment``): its YAML and :mod:`.task`."""
