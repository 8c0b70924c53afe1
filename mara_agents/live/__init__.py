"""Live mode: real training jobs scheduled on a Ray cluster."""
