"""Differential fuzzing of twintrack against eager PyTorch.

- `graphs`: hypothesis strategies for random op graphs (3-12 ops, every
  dtype), kept as Python source;
- `check`: one graph exported, compiled and compared with eager (in a
  coverage worker subprocess, so crashes are results);
- `campaign`: rounds of hypothesis with shrinking of each new failure
  signature; chunks (one seed each) added up to one campaign at one
  commit, and its JSON/markdown report;
- `chunk`: one chunk in a process of its own, so chunks run side by side.

`tools/fuzz.py` is the command line.
"""
