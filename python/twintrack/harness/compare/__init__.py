"""The side-by-side comparison of the two tracks (tools/compare.py) and the
benchmark suite over the zoo (tools/bench.py)."""
