#!/usr/bin/env python3
"""Thin wrapper: see python/twintrack/cli/gpu_check.py (or run with --help)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

if __name__ == "__main__":  # the check's worker processes import this file again (multiprocessing's spawn)
    from twintrack.cli.gpu_check import entry

    sys.exit(entry())
