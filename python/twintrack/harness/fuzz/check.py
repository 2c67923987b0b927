"""One fuzzed graph, checked in this process (a coverage worker calls this,
so a crash only kills the worker): the source is executed, the module
compiled by `twintrack.compile`, as a user compiles it, and its outputs compared with eager's
exactly as the coverage suite compares them (float64 reference for floats,
exact for integers and bools, same NaN pattern).

The result's `kind` says what failed (mismatch, compile, run, export-fail,
internal); the fuzzer shrinks each kind separately.
"""

from __future__ import annotations

import hashlib
import linecache
import sys
import types
from pathlib import Path

import torch

from twintrack.harness.coverage.cases import Sample, widened
from twintrack.harness.coverage.outputs import compare_outputs
from twintrack.harness.coverage.runner import exception_line, save_gpu_artifact, user_compile


def load_source(source: str):
    """(module, inputs) of a fuzzer script. It becomes a real (registered)
    module with its text in linecache: torch.export and twintrack's source
    locations look both up."""
    name = f"twintrack_fuzzed_{hashlib.sha1(source.encode()).hexdigest()[:12]}"
    filename = f"<fuzzed graph {name[-12:]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - the fuzzer's own text
    return module.Fuzzed(), module.make_inputs()


def check_source(source: str, target: str = "cpu", artifact_dir: Path | None = None) -> dict:
    """{'status', 'kind', 'reason', 'compile_s'} for one graph; status as in
    the coverage suite. A GPU compile with `artifact_dir` saves the artifact
    there with the graph's inputs and references, as the coverage suite's
    --gpu-artifacts does, so the GPU machine checks both the same way."""
    module, inputs = load_source(source)
    try:
        with torch.no_grad():
            eager = module(*[x.clone() for x in inputs])
    except Exception as e:
        return {"status": "skip", "kind": "eager", "reason": f"eager: {exception_line(e)}"}
    compiled, failure, seconds = user_compile(module, inputs, "cpu" if target == "cpu" else "gpu")
    if failure:
        kind = "export" if failure[0] == "export" or failure[1].startswith("export:") else "compile"
        return {"status": failure[0], "kind": kind, "reason": failure[1], "compile_s": seconds}
    if target != "cpu":
        if artifact_dir is not None:
            _save_for_the_gpu(compiled, module, inputs, eager, source, artifact_dir)
        return {"status": "pass", "kind": "", "reason": "", "compile_s": seconds}
    return {**_run_and_compare(module, inputs, compiled, eager), "compile_s": seconds}


def _save_for_the_gpu(compiled, module, inputs, eager, source: str, artifact_dir: Path) -> None:
    sample = Sample(module, tuple(inputs), module, widened(tuple(inputs)), "fuzzed graph")
    directory = artifact_dir / f"fuzz-{hashlib.sha1(source.encode()).hexdigest()[:12]}"
    save_gpu_artifact(compiled, sample, eager, directory)
    (directory / "graph.py").write_text(source)


def _run_and_compare(module, inputs, compiled, eager) -> dict:
    try:
        with torch.no_grad():
            actual = compiled(*[x.clone() for x in inputs])
    except Exception as e:
        return {"status": "fail", "kind": "run", "reason": f"run: {exception_line(e)}"}
    try:
        with torch.no_grad():
            reference = module(*widened(tuple(x.clone() for x in inputs)))
    except Exception:
        reference = None
    verdict = compare_outputs(actual, eager, reference)
    return {"status": "pass" if verdict.ok else "fail", "kind": "" if verdict.ok else "mismatch",
            "reason": verdict.reason}
