"""Benchmarks: v2 against its baselines, side by side in one run (`python -m v2.bench`)."""
