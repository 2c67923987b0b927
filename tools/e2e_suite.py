#!/usr/bin/env python3
"""Thin wrapper: see python/twintrack/cli/e2e_suite.py (or run with --help)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from twintrack.cli.e2e_suite import entry  # noqa: E402

sys.exit(entry())
