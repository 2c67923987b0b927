"""Command-line entry points (tools/compile.py, tools/run.py)."""
