"""tools/e2e_suite.py: torch-mlir's end-to-end test suite through twintrack.

torch-mlir's suite (`projects/pt1/python/torch_mlir_e2e_test` in its
repository) is some 1,800 small modules, each called on its own inputs and
compared with eager by the suite's own tolerance checks. This tool runs
every test through `twintrack.compile` on the CPU, as a user of the suite
would, in worker processes of CHUNK tests each (a crash ends only its
worker; a test that runs past --timeout is killed and recorded), and
writes:

  OUT/results.jsonl   one line per test: pass, mismatch, error, crash or
                      timeout, with the error's last line (resumable: a
                      rerun skips the tests recorded, --fresh starts over)
  OUT/report.md       the pass rate, the statuses, and, where the suite's
                      `e2e_testing/xfail_sets.py` is found beside it, the
                      tests torch-mlir's own fx-importer backend passes and
                      twintrack does not.

The suite is read from a checkout given by --suite; nothing of it is copied.
Its modules that need packages this environment lacks (torchvision) are
skipped and listed. Three imports the suite expects from a torch-mlir build
(the `multiprocess` package, `torch_mlir._version`, the custom-op example
extension) get stand-ins: this tool runs the tests itself.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

from .common import CommandParser, add_debug_flag, progress, run_main, write_whole

STATUSES = ("pass", "mismatch", "error", "crash", "timeout")
WORKER_STARTUP_SECONDS = 120.0  # a worker's imports (torch, twintrack) before its first test, on a loaded machine


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="e2e_suite.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=Path, required=True,
                        help="the directory holding torch_mlir_e2e_test (torch-mlir's projects/pt1/python)")
    parser.add_argument("--out", type=Path, default=Path("out/e2e"), help="where results and the report go "
                        "(default: out/e2e)")
    parser.add_argument("--only", default=None, help="run the tests whose name contains this text")
    parser.add_argument("--chunk", type=int, default=40, help="tests per worker process (default: 40)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one test may take before its worker is killed (default: 120)")
    parser.add_argument("--fresh", action="store_true", help="forget the recorded results and start over")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)  # internal: run these tests, append results
    add_debug_flag(parser)
    return parser


# ---------------------------------------------------------------- the suite, loaded

def _stand_ins() -> None:
    """Modules the suite imports from a torch-mlir build that this run does not need."""
    import torch
    from packaging import version
    runner = types.ModuleType("multiprocess")
    runner.set_start_method, runner.cpu_count, runner.Pool = (lambda *a, **k: None), os.cpu_count, None
    sys.modules.setdefault("multiprocess", runner)
    build = types.ModuleType("torch_mlir._version")
    build.version = version
    build.torch_version_for_comparison = lambda: version.parse(torch.__version__.split("+")[0])
    sys.modules.setdefault("torch_mlir._version", build)
    sys.modules.setdefault("torch_mlir._torch_mlir_custom_op_example",
                           types.ModuleType("torch_mlir._torch_mlir_custom_op_example"))


def load_tests(suite: Path) -> tuple[dict, list[str]]:
    """({name: test} of every test whose module imports, [skipped modules with the reason])."""
    import importlib
    if not (suite / "torch_mlir_e2e_test").is_dir():
        from ..errors import UsageError
        raise UsageError(f"--suite {suite}: no torch_mlir_e2e_test directory there "
                         "(give torch-mlir's projects/pt1/python)")
    sys.path.insert(0, str(suite))
    _stand_ins()
    from torch_mlir_e2e_test.registry import GLOBAL_TEST_REGISTRY
    skipped = []
    for path in sorted((suite / "torch_mlir_e2e_test" / "test_suite").glob("*.py")):
        if path.stem == "__init__":
            continue
        try:
            importlib.import_module(f"torch_mlir_e2e_test.test_suite.{path.stem}")
        except Exception as e:  # noqa: BLE001 - a module that needs what is not installed
            skipped.append(f"{path.stem}: {type(e).__name__}: {e}")
    return {test.unique_name: test for test in GLOBAL_TEST_REGISTRY}, skipped


def _twintrack_config():
    import torch
    import twintrack
    from torch_mlir_e2e_test.framework import TestConfig, TraceItem

    class Twintrack(TestConfig):
        """Each traced call compiled for its inputs and run: the suite compares the results."""
        def compile(self, program, verbose=False):
            return program

        def run(self, artifact, trace):
            results = []
            for item in trace:
                compiled = twintrack.compile(artifact, tuple(item.inputs))
                with torch.no_grad():
                    results.append(TraceItem(symbol=item.symbol, inputs=item.inputs, output=compiled(*item.inputs)))
            return results
    return Twintrack()


def run_worker(suite: Path, names: list[str], results: Path) -> None:
    """Run `names`, appending a 'started' line before each test and its outcome after."""
    import torch
    tests, _ = load_tests(suite)
    from torch_mlir_e2e_test.framework import compile_and_run_test
    from torch_mlir_e2e_test.reporting import ErrorContext, SingleTestReport
    config = _twintrack_config()
    torch.autograd.set_grad_enabled(False)
    _warm_up()
    for name in names:
        _append(results, {"name": name, "status": "started"})
        start = time.perf_counter()
        outcome = compile_and_run_test(tests[name], config)
        error = outcome.compilation_error or outcome.runtime_error
        if error:
            status, detail = "error", (error.strip().splitlines() or [""])[-1]
        else:
            report = SingleTestReport(outcome, ErrorContext.empty())
            status, detail = ("mismatch", " ".join(report.error_str().split())) if report.failed else ("pass", "")
        _append(results, {"name": name, "status": status, "detail": _portable(detail, suite)[:400],
                          "seconds": round(time.perf_counter() - start, 2)})


def _warm_up() -> None:
    """One tiny compile before the first test, so that its clock (and
    --timeout) times that test and not the imports every compile needs once
    (torch.export's Dynamo, the MLIR bindings, the JIT). A failure here is
    left for the first test to report as its own."""
    import torch
    import twintrack
    try:
        twintrack.compile(torch.nn.ReLU(), (torch.zeros(2),))(torch.zeros(2))
    except Exception:
        pass


def _portable(text: str, suite: Path) -> str:
    """`text` without this machine's directories: the suite's test files and
    installed packages named from their own roots."""
    text = text.replace(f"{suite.resolve()}/", "").replace(f"{suite}/", "")
    return re.sub(r"/\S*?/site-packages/", "", text).replace(f"{Path.cwd()}/", "")


def _append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def recorded(path: Path) -> dict[str, dict]:
    """The last line recorded for each test."""
    rows = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            rows[row["name"]] = row
    return rows


# ---------------------------------------------------------------- the campaign

def run_all(args: argparse.Namespace, names: list[str], results: Path) -> None:
    """Workers of --chunk tests until every name has an outcome; a worker
    that dies marks its running test a crash, one stuck past --timeout a timeout."""
    while True:
        rows = recorded(results)
        todo = [n for n in names if rows.get(n, {}).get("status") in (None, "started")]
        if not todo:
            return
        chunk = todo[:args.chunk]
        progress(f"e2e: {len(names) - len(todo)}/{len(names)} done; running from {chunk[0]}")
        command = [sys.executable, "-m", "twintrack.cli.e2e_suite", "--suite", str(args.suite), "--out",
                   str(args.out), "--worker", *chunk]
        worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr = _watch(worker, results, args.timeout)
        rows = recorded(results)
        if rows.get(chunk[0], {}).get("status") is None:  # it died before its first test: it would again
            from ..errors import UsageError
            raise UsageError(f"a worker exited {worker.returncode} before its first test: "
                             + (stderr.strip().splitlines() or [""])[-1])
        for name in chunk:
            if rows.get(name, {}).get("status") == "started":
                status = "timeout" if worker.returncode == -9 else "crash"
                _append(results, {"name": name, "status": status,
                                  "detail": f"worker exit {worker.returncode}" if status == "crash"
                                  else f"past {args.timeout:g} s"})
                break  # the tests after it are rerun by the next worker


def _watch(worker: subprocess.Popen, results: Path, timeout: float) -> str:
    """Wait for `worker`; kill it when its running test passes `timeout`
    (a test's clock starts at its `started` row: the worker's imports before
    its first test have WORKER_STARTUP_SECONDS of their own). Its stderr's last 4 kB."""
    import threading
    tail = collections.deque(maxlen=64)
    reader = threading.Thread(target=lambda: tail.extend(worker.stderr), daemon=True)
    reader.start()

    def size_now() -> int:
        return results.stat().st_size if results.exists() else 0

    last_size, since, limit = size_now(), time.monotonic(), max(timeout, WORKER_STARTUP_SECONDS)
    while worker.poll() is None:
        size = size_now()
        if size != last_size:
            last_size, since, limit = size, time.monotonic(), timeout
        elif time.monotonic() - since > limit:
            worker.kill()
            worker.wait()
            break
        time.sleep(0.5)
    reader.join(timeout=5)
    return "".join(tail)[-4096:]


def reference_failures(suite: Path) -> set[str] | None:
    """The tests torch-mlir's fx-importer (linalg) backend is expected to fail, from the suite's xfail sets."""
    xfails = suite.parent / "e2e_testing" / "xfail_sets.py"
    if not xfails.exists():
        return None
    sys.path.insert(0, str(xfails.parent))
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints torch's version
            import xfail_sets
    except Exception:  # noqa: BLE001 - another version's file: no comparison
        return None
    return set(xfail_sets.FX_IMPORTER_XFAIL_SET) | set(xfail_sets.FX_IMPORTER_CRASHING_SET)


def report(rows: dict[str, dict], skipped: list[str], reference: set[str] | None) -> str:
    counts = collections.Counter(row["status"] for row in rows.values())
    total, passed = len(rows), counts["pass"]
    lines = ["# torch-mlir's e2e suite through twintrack (CPU)", "",
             f"{passed} of {total} tests pass ({passed / max(total, 1):.1%}); "
             + ", ".join(f"{status} {counts[status]}" for status in STATUSES if counts[status]) + ".", ""]
    if reference is not None:
        expected = sum(1 for name in rows if name not in reference)
        lines += [f"torch-mlir's fx-importer backend is expected to pass {expected} of them "
                  f"({expected / max(total, 1):.1%}, its xfail sets).", ""]
        behind = sorted(n for n, row in rows.items() if row["status"] != "pass" and n not in reference)
        lines += [f"## Tests it passes and twintrack does not ({len(behind)})", "", "| test | status | detail |",
                  "|---|---|---|"]
        lines += [f"| {n} | {rows[n]['status']} | {_cell(rows[n].get('detail', ''))} |" for n in behind]
        lines.append("")
    failing = sorted(n for n, row in rows.items() if row["status"] != "pass")
    lines += [f"## Every test that does not pass ({len(failing)})", "", "| test | status | detail |", "|---|---|---|"]
    lines += [f"| {n} | {rows[n]['status']} | {_cell(rows[n].get('detail', ''))} |" for n in failing]
    if skipped:
        lines += ["", "## Suite modules skipped", ""] + [f"- {line}" for line in skipped]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:200]


def main(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    if args.worker:
        run_worker(args.suite, args.worker, results)
        return 0
    if args.fresh and results.exists():
        results.unlink()
    tests, skipped = load_tests(args.suite)
    names = sorted(n for n in tests if args.only is None or args.only in n)
    run_all(args, names, results)
    rows = {n: row for n, row in recorded(results).items() if n in names}
    write_whole(args.out / "report.md", report(rows, skipped, reference_failures(args.suite)))
    passed = sum(row["status"] == "pass" for row in rows.values())
    print(f"{passed}/{len(rows)} pass; report: {args.out / 'report.md'}")
    return 0


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
