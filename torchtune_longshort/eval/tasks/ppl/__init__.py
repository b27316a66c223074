"""Long-context perplexity (``longshort_ppl``): its YAML and :mod:`.task`."""
