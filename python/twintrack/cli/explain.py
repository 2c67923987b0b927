"""tools/explain.py MODEL: see DESCRIPTION (its --help)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from .common import CommandParser, add_debug_flag, progress, run_main, write_whole

DESCRIPTION = """\
Show what torch.compile makes of a model before any backend sees it:
Dynamo's graphs and their ops, each graph break with its reason and the
model's source line, and each recompile with the guard that failed.
"""

EPILOG = """\
MODEL is a zoo model (zoo:transformer_block), a file.py:factory, or a
torch.export file, as for tools/compile.py. The model runs --calls times
(default 2): first on its example inputs, then on fresh random inputs of
the same shapes (integer inputs are kept), so that a call that changes
the model's state shows the recompile it causes. Its prints print; nothing
is compiled by twintrack (`torch.compile(model, backend="twintrack")` then
compiles each graph listed here). The same report from Python:
twintrack.explain(model, *inputs, calls=[...]).

Exit codes: 0, or 2 for an error (a model that cannot be loaded, a --json
file that cannot be written), in one line.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="explain.py", description=DESCRIPTION, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="the model (see below)")
    parser.add_argument("--calls", type=int, default=2, help="times to call the model (default: %(default)s)")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                        help="cast the model's floating-point parameters and inputs first (default: as the model is)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON to FILE")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..dynamo_explain import explain
    from ..frontend.model_spec import load_user_model

    if args.calls < 1:
        raise UsageError("--calls must be 1 or more")
    source = load_user_model(args.model, args.dtype)
    inputs = source.call_arguments(source.example_inputs)
    later = [source.call_arguments(_fresh(source.example_inputs)) for _ in range(args.calls - 1)]
    progress(f"calling {args.model} {args.calls} time(s) under Dynamo")
    report = explain(source.module, *inputs, calls=later)
    if args.json:
        write_whole(args.json, json.dumps(asdict(report), indent=1) + "\n")
    print(report.text(), end="")
    return 0


def _fresh(tensors: tuple) -> tuple:
    import torch
    return tuple(torch.randn_like(x) if x.is_floating_point() else x for x in tensors)


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)
