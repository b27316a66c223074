"""LongBench-E, all 13 datasets with the official scoring (``longshort_longbench_e``): its YAMLs and :mod:`.task`."""
