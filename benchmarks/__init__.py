"""Benchmarks: quality and speed of tformer, measured side by side with their anchors. Results go to JSON."""
