"""Device checks without a GPU: the fake-CUDA harness, autocast, determinism, host syncs (issue
27)."""
