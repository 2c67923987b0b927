"""Differential fuzzing of twintrack against eager PyTorch.

- `graphs`: hypothesis strategies for random op graphs (3-12 ops, every
  dtype), kept as Python source;
- `check`: one graph exported, compiled and compared with eager (in a
  coverage worker subprocess, so crashes are results);
- `campaign`: rounds of hypothesis with shrinking of each new failure
  signature, and the JSON/markdown report.

`tools/fuzz.py` is the command line.
"""
