"""Passkey retrieval (``longshort_passkey``): its YAML and :mod:`.task`."""
