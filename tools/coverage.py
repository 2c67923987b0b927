#!/usr/bin/env python3
"""tools/coverage.py: PyTorch's OpInfo (and ModuleInfo) suite through twintrack.

Every OpInfo of torch.testing._internal.common_methods_invocations.op_db at
float32, float16, bfloat16, int64, int32, uint8 and bool (the dtypes it
supports on the CPU) becomes a small module per sample: the sample's tensors
are its inputs, its other arguments are baked in. Each is exported, compiled
for the CPU and checked against eager: against a float64 eager run where the
op has one (with the dtype's tolerance, and no worse than eager's own
error), exactly for integer and bool outputs, with the same NaN pattern.

Each case runs in a worker subprocess, so a segfault is recorded as
'crash (SIGSEGV)' and a hang as a timeout, and the run goes on.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

EPILOG = """\
modes (default: the CPU suite):
  --gpu-compile          compile each case that passes on the CPU for the GPU
                         (compile only, no GPU needed): opinfo-gpu.{json,md}
  --gpu-artifacts DIR    the same, and save each GPU artifact with its sample's
                         inputs and eager/float64 outputs in DIR/<case>-sN/
  --check-gpu-artifacts DIR
                         on the GPU machine (torch + cuda-bindings, no MLIR):
                         run each artifact of DIR on its saved inputs and check
                         it as the CPU suite does; DIR/gpu-numerics.{json,md}
  --sample               only the fixed sample of test_coverage_sample.py
  --update-expected      run the sample and rewrite test/python/coverage_expected.json

statuses: pass; fail (mismatch with its max error, a compile error's first
line, a run error, 'crash (SIGSEGV)', 'timeout after N s'); unsupported (a
twintrack error that says so); export (torch.export rejects the module,
strict=False and strict=True: not counted against twintrack); skip (eager
itself fails). Each case is compiled as users compile: twintrack.compile.
Eigenvectors (linalg.eigh) are compared up to each column's sign. A random
op, or a sample whose eager output changes with the seed (dropout
in training mode inside multi_head_attention_forward), is checked by the
shapes and dtypes of its outputs only (its sample records shape_only).

the committed table (bench/coverage) comes from one run at one commit:
  .venv/bin/python tools/coverage.py --commit HEAD --jobs 2 --limit 500
runs in a git worktree of the commit (out/worktrees/<sha>), so edits made
meanwhile don't leak in; run it again (same --commit sha) for the next
chunk: cases already in the table are skipped. The table records the
commit and the options, and refuses rows of another commit or other
options (--fresh starts over). Without --commit, runs go to out/coverage.

examples:
  .venv/bin/python tools/coverage.py --ops '^(add|mul)$' --dtypes float32 int64
  .venv/bin/python tools/coverage.py --retry fail          # local: re-run out/coverage's failures
  .venv/bin/python tools/coverage.py --modules --ops BatchNorm
  .venv/bin/python tools/coverage.py --commit HEAD --gpu-artifacts out/cov-gpu --spread 500
  python3 tools/coverage.py --check-gpu-artifacts out/cov-gpu     # on the H200

The JSON and markdown are rewritten as results come (every 30 s), so a
stopped run leaves a report marked PARTIAL that the next chunk resumes.
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", default=None, metavar="REV",
                        help="run at this commit, from a worktree of it: what writes bench/coverage")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="where opinfo.json and opinfo.md go (default: bench/coverage with --commit, "
                             "else out/coverage)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--samples", type=int, default=None,
                        help="samples per (op, dtype) (default 2; 1 for --sample and --update-expected)")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds per case before its worker is killed: a timeout (default 120)")
    parser.add_argument("--dtypes", nargs="+", default=None, metavar="DTYPE",
                        help="subset of float32 float16 bfloat16 int64 int32 uint8 bool")
    parser.add_argument("--ops", default=None, metavar="REGEX", help="only ops (or modules) whose name matches")
    parser.add_argument("--cases", nargs="+", default=None, metavar="ID", help="explicit case ids (abs:float32 ...)")
    parser.add_argument("--modules", action="store_true", help="add common_modules.module_db (training modes included)")
    parser.add_argument("--only-modules", action="store_true", help="module_db only")
    parser.add_argument("--order", choices=("dtype", "op"), default="dtype",
                        help="dtype-major (every op at float32 first; default) or op-major")
    parser.add_argument("--spread", type=int, default=None, metavar="N",
                        help="an evenly spaced, fixed sample of N of the selected cases (with a GPU mode: of "
                             "the CPU passes), e.g. --gpu-artifacts DIR --spread 500")
    parser.add_argument("--limit", type=int, default=None, help="run at most this many (new) cases")
    parser.add_argument("--fresh", action="store_true", help="ignore the existing JSON; start over")
    parser.add_argument("--retry", nargs="+", default=(), metavar="STATUS",
                        help="local work: re-run stored cases with these statuses (e.g. fail unsupported); "
                             "the table is then marked mixed, and bench/coverage refuses it")
    parser.add_argument("--recycle", type=int, default=100, help="restart a worker after this many cases (default 100)")
    parser.add_argument("--worker-log", type=Path, default=None, help="append the workers' stderr to this file")
    parser.add_argument("--quiet", action="store_true", help="no line per case, only a summary")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: rewrite the markdown (and totals) from the JSON")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--gpu-compile", action="store_true", help="GPU compile-only status of each CPU pass")
    mode.add_argument("--gpu-artifacts", type=Path, default=None, metavar="DIR",
                      help="GPU compile of each CPU pass, artifacts (with inputs and references) saved in DIR")
    mode.add_argument("--check-gpu-artifacts", type=Path, default=None, metavar="DIR",
                      help="on a GPU machine: run and check the artifacts of DIR")
    mode.add_argument("--sample", action="store_true", help="only the fixed sample of test_coverage_sample.py")
    mode.add_argument("--update-expected", action="store_true",
                      help="run the sample and rewrite test/python/coverage_expected.json")
    return parser.parse_args(argv)


def select_cases(args) -> list[str]:
    """The case ids the options name, in run order."""
    from twintrack.harness.coverage import cases, sample
    if args.sample or args.update_expected:
        return list(sample.SAMPLE_CASES)
    if args.cases:
        return list(args.cases)
    dtypes = tuple(args.dtypes or cases.DTYPES)
    unknown = set(dtypes) - set(cases.DTYPES)
    if unknown:
        raise SystemExit(f"unknown dtypes: {', '.join(sorted(unknown))}")
    chosen = cases.all_cases(dtypes, with_modules=args.modules or args.only_modules, order=args.order)
    if args.only_modules:
        chosen = [c for c in chosen if c.kind == "module"]
    if args.ops:
        pattern = re.compile(args.ops)
        chosen = [c for c in chosen if pattern.search(c.name)]
    return [c.id for c in chosen]


def store_paths(args) -> tuple[Path, Path, str]:
    """(json, md, title) for the mode."""
    if args.gpu_compile or args.gpu_artifacts:
        return args.out_dir / "opinfo-gpu.json", args.out_dir / "opinfo-gpu.md", "OpInfo coverage: GPU compile-only"
    return args.out_dir / "opinfo.json", args.out_dir / "opinfo.md", "OpInfo coverage: CPU"


def evenly_spaced(ids: list[str], count: int) -> list[str]:
    """`count` of `ids`, evenly spaced in their order (all of them if fewer)."""
    if count >= len(ids):
        return list(ids)
    return [ids[i * len(ids) // count] for i in range(count)]


def cpu_passes(args, run: dict) -> set[str]:
    """The cases the CPU report of the same commit says pass: what the GPU modes compile."""
    from twintrack.harness.coverage.report import Store
    store = Store.load(args.out_dir / "opinfo.json")
    if not store.cases:
        raise SystemExit(f"no CPU report in {args.out_dir}/opinfo.json: run the CPU suite first")
    if store.meta.get("commit") != run["commit"]:
        raise SystemExit(f"the CPU report is of {store.meta.get('commit')}, this run of {run['commit']}")
    return {i for i, r in store.cases.items() if r["status"] == "pass"}


def run_identity(args, source: dict) -> dict:
    """What makes chunks one run (report.RUN_KEYS): the source and the options."""
    import torch
    target = "gpu-compile" if (args.gpu_compile or args.gpu_artifacts) else "cpu"
    selection = {"dtypes": args.dtypes, "ops": args.ops, "cases": args.cases, "spread": args.spread,
                 "modules": args.modules or args.only_modules, "only_modules": args.only_modules}
    return {**source, "torch": torch.__version__, "target": target, "samples": args.samples,
            "timeout_s": args.timeout, "selection": {k: v for k, v in selection.items() if v}}


class Progress:
    """One line per finished case, with the rate, and ETAs for this chunk and
    for every case of the selection still to run."""

    def __init__(self, total: int, left: int, quiet: bool):
        self.total, self.left, self.quiet = total, left, quiet
        self.done, self.started = 0, time.monotonic()
        self.counts: dict[str, int] = {}

    def __call__(self, result: dict) -> None:
        self.done += 1
        self.counts[result["status"]] = self.counts.get(result["status"], 0) + 1
        if not self.quiet or self.done == self.total:
            reason = f"  {result['reason'][:150]}" if result["status"] != "pass" else ""
            print(f"[{self.line()}] {result['id']}: {result['status']} ({result.get('wall_s') or 0:.1f}s){reason}",
                  flush=True)

    def line(self) -> str:
        minutes = (time.monotonic() - self.started) / 60
        rate = self.done / minutes if minutes else 0.0
        eta = (lambda n: f"{n / rate:.0f}m" if rate else "?")
        return (f"{self.done}/{self.total} {minutes:.0f}m {rate:.1f}/min eta {eta(self.total - self.done)}, "
                f"all {eta(self.left - self.done)}")

    def summary(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))


def run_cases(ids: list[str], args, target: str, artifact_root: Path | None, on_result) -> None:
    from twintrack.harness.coverage.pool import Pool
    log = open(args.worker_log, "ab") if args.worker_log else None
    pool = Pool(args.jobs, args.timeout, args.recycle, stderr=log)
    requests = [{"case": i, "samples": args.samples, "target": target,
                 "artifacts": str(artifact_root) if artifact_root else None} for i in ids]
    try:
        pool.run(requests, on_result)
    finally:
        if log:
            log.close()


def open_store(args, run: dict):
    """The table this run writes; rows of another run refused (--retry takes them, marked)."""
    from twintrack.harness.coverage.report import Store
    json_path, _, _ = store_paths(args)
    store = Store(json_path) if args.fresh else Store.load(json_path)
    if not args.report_only:
        store.claim(run, retry=bool(args.retry))
    return store


def suite(args, source: dict) -> int:
    """The CPU suite or a GPU compile mode: select, resume, run, report."""
    run = run_identity(args, source)
    store = open_store(args, run)
    json_path, md_path, title = store_paths(args)
    ids = select_cases(args)
    if args.gpu_compile or args.gpu_artifacts:
        passing = cpu_passes(args, run)
        ids = [i for i in ids if i in passing]
    if args.spread:
        ids = evenly_spaced(ids, args.spread)
    retry = set(args.retry)
    left = [i for i in ids if i not in store.cases or store.cases[i]["status"] in retry]
    todo = [] if args.report_only else left[:args.limit] if args.limit is not None else left
    store.meta["selected"] = len(ids)
    print(f"{len(ids)} cases selected, {len(ids) - len(left)} already done, {len(todo)} to run now "
          f"({len(left)} left)", flush=True)
    progress, last_save = Progress(len(todo), len(left), args.quiet), [time.monotonic()]

    def on_result(result: dict) -> None:
        store.add(result)
        progress(result)
        if time.monotonic() - last_save[0] > 30:
            _save(store, md_path, title, ids)
            last_save[0] = time.monotonic()

    started = time.monotonic()
    try:
        target = "gpu" if (args.gpu_compile or args.gpu_artifacts) else "cpu"
        run_cases(todo, args, target, args.gpu_artifacts, on_result)
    except KeyboardInterrupt:
        print("interrupted: writing a partial report", flush=True)
    if todo:
        store.add_chunk({"jobs": args.jobs, "cases": progress.done, "seconds": round(time.monotonic() - started, 1)})
    _save(store, md_path, title, ids)
    print(f"done: {progress.summary()}; report {md_path}", flush=True)
    return 0


def _save(store, md_path: Path, title: str, ids: list[str]) -> None:
    from twintrack.harness.coverage.report import markdown
    store.save(all(i in store.cases for i in ids))
    md_path.write_text(markdown(store, title))


def sample_mode(args) -> int:
    """The fixed sample: compare with the expected file, or record it (never a downgrade)."""
    from twintrack.harness.coverage import sample
    results: dict[str, dict] = {}
    progress = Progress(len(sample.SAMPLE_CASES), len(sample.SAMPLE_CASES), args.quiet)

    def on_result(result):
        results[result["id"]] = result
        progress(result)

    run_cases(list(sample.SAMPLE_CASES), args, "cpu", None, on_result)
    expected = sample.load_expected()
    regressions, improvements = sample.compare_with_expected(results, expected)
    for line in improvements:
        print(f"improved: {line}")
    if args.update_expected:
        sample.write_expected(sample.updated_expected(results, expected))
        print(f"wrote {sample.EXPECTED_FILE}")
        return 0
    for line in regressions:
        print(f"REGRESSION: {line}")
    return 1 if regressions else 0


def source_of_run(args, argv: list[str]) -> dict:
    """This run's source stamp (and out-dir); with --commit, this process
    first becomes the run from the commit's worktree."""
    from twintrack.harness.coverage.at_commit import run_source
    if args.commit and (args.sample or args.update_expected or args.retry):
        raise SystemExit("coverage.py: --commit is for whole runs: not with --sample, --update-expected or --retry")
    source, args.out_dir = run_source(REPO, args.commit, "tools/coverage.py", argv, args.out_dir,
                                      REPO / "bench" / "coverage")
    return source


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    from twintrack.cli.common import sigterm_as_interrupt
    from twintrack.harness.coverage.at_commit import Refused
    sigterm_as_interrupt()
    if args.samples is None:
        args.samples = 1 if (args.sample or args.update_expected) else 2
    if args.check_gpu_artifacts:
        from twintrack.harness.coverage.gpu_numerics import check_directory
        return check_directory(args.check_gpu_artifacts)
    try:
        if args.sample or args.update_expected:
            return sample_mode(args)
        return suite(args, source_of_run(args, argv))
    except Refused as refusal:
        print(f"coverage.py: refused: {refusal}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
