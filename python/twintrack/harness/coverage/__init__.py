"""Op coverage: every OpInfo (and, on request, ModuleInfo) of PyTorch's own
test suite, at several dtypes, compiled by twintrack and checked against
eager PyTorch.

The pieces, each small enough to read on its own:
- `cases`: which (op, dtype) cases exist and how a sample becomes a module;
- `outputs`: how a compiled output is judged against eager (shared with the
  fuzzer, so both say "mismatch" for the same reason);
- `runner`: one case, in-process: twintrack.compile, run, compare;
- `pool`: worker subprocesses, so a segfault is a result, not the end of the run;
- `report`: the JSON and markdown tables and the totals; a table holds one run;
- `at_commit`: a run from a git worktree of one commit, and the stamp of its source;
- `sample`: the fixed breadth sample that `make test` runs.

`tools/coverage.py` is the command line.
"""
