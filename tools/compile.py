#!/usr/bin/env python3
"""Thin wrapper: see python/twintrack/cli/compile.py (or run with --help)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from twintrack.cli.common import exit_without_teardown  # noqa: E402
from twintrack.cli.compile import entry  # noqa: E402

exit_without_teardown(entry())
