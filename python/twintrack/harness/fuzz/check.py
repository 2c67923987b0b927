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
import time
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
    if target in ("cpu-dynamic", "gpu-dynamic-emulated"):
        return check_dynamic(module, inputs, emulate_gpu=target == "gpu-dynamic-emulated")
    compiled, failure, seconds = user_compile(module, inputs, "cpu" if target == "cpu" else "gpu")
    if failure:
        kind = "export" if failure[0] == "export" or failure[1].startswith("export:") else "compile"
        return {"status": failure[0], "kind": kind, "reason": failure[1], "compile_s": seconds}
    if target != "cpu":
        if artifact_dir is not None:
            _save_for_the_gpu(compiled, module, inputs, eager, source, artifact_dir)
        return {"status": "pass", "kind": "", "reason": "", "compile_s": seconds}
    return {**_run_and_compare(module, inputs, compiled, eager), "compile_s": seconds}


DYNAMIC_SIZES = 3  # sets of sizes a dynamic compile is checked at, beside its example's


def open_batch_dims(inputs: list) -> str:
    """A --dynamic spec leaving each input's first dim of 2 or more open
    (a size of 1 would let torch specialize): dims of equal sizes share a
    name; each range runs from 2 to twice the example and more."""
    specs = []
    for position, x in enumerate(inputs):
        dim = next((d for d, size in enumerate(x.shape) if size >= 2), None) if isinstance(x, torch.Tensor) else None
        if dim is not None:
            size = x.shape[dim]
            specs.append(f"{position}:{dim}=d{size}[2,{2 * size + 3}]")
    return ",".join(specs)


def check_dynamic(module, inputs, emulate_gpu: bool = False) -> dict:
    """The graph compiled once with its inputs' first dims open
    (`open_batch_dims`), then run at its example's sizes and at
    DYNAMIC_SIZES others drawn in range, each compared with eager as
    `check_source` compares; with `emulate_gpu`, compiled for the GPU and
    its generic kernels run on the CPU (harness/gpu_emulation.py). A spec
    the model contradicts (torch.export refuses it: a dim it specializes, a
    broadcast that ties two names) is a skip; the first size that fails is
    the result."""
    import twintrack
    from twintrack.dynamic_shapes import concrete_shape, parse_dynamic, random_sizes
    from twintrack.errors import UsageError

    from .graphs import random_tensor
    spec = open_batch_dims(inputs)
    if not spec:
        return {"status": "skip", "kind": "eager", "reason": "no input with a first dim of 2 or more to leave open"}
    dims = parse_dynamic(spec, [f"input{i}" for i in range(len(inputs))], tuple(inputs))
    started = time.perf_counter()
    try:
        if emulate_gpu:
            from twintrack.harness.gpu_emulation import emulated_model
            compiled = emulated_model(twintrack.export(module, tuple(inputs), checks=False, dynamic=dims))
        else:
            compiled = twintrack.compile(module, tuple(inputs), dynamic=dims)
            compiled.poison_outputs = True
    except UsageError as e:
        if "disagrees with the model" in str(e):
            return {"status": "skip", "kind": "export", "reason": f"export: {exception_line(e)}"}
        if "needs that size at compile time" in str(e):  # refused, with the reason: not a wrong result
            return {"status": "unsupported", "kind": "compile", "reason": f"compile: {exception_line(e)}"}
        if "does not emulate" in str(e):  # kernels only a GPU runs
            return {"status": "skip", "kind": "eager", "reason": f"emulation: {exception_line(e)}"}
        return {"status": "fail", "kind": "compile", "reason": f"compile: {exception_line(e)}"}
    except Exception as e:
        from twintrack.errors import ModelLoadError
        from twintrack.harness.coverage.runner import compile_error_status
        if isinstance(e, ModelLoadError) and "torch.export failed" in str(e):  # torch's, with these dims open
            return {"status": "export", "kind": "export", "reason": f"export: {exception_line(e)}"}
        status, reason = compile_error_status(e)
        return {"status": status, "kind": "compile", "reason": reason}
    seconds = round(time.perf_counter() - started, 3)
    generator = torch.Generator().manual_seed(0)
    shapes = [None] + [random_sizes(dims, generator) for _ in range(DYNAMIC_SIZES)]
    for sizes in shapes:
        sized = inputs if sizes is None else [
            random_tensor(concrete_shape(_named(x, position, dims), sizes), x.dtype, generator)
            for position, x in enumerate(inputs)]
        try:
            with torch.no_grad():
                eager = module(*[x.clone() for x in sized])
        except Exception:
            continue  # eager itself refuses these sizes
        result = _run_and_compare(module, sized, compiled, eager)
        if result["status"] != "pass":
            at = "the example's sizes" if sizes is None else ", ".join(f"{k}={v}" for k, v in sizes.items())
            return {**result, "reason": f"{result['reason']} (at {at})", "compile_s": seconds}
    return {"status": "pass", "kind": "", "reason": "", "compile_s": seconds}


def _named(x: torch.Tensor, position: int, dims) -> tuple:
    """The input's shape with its open dims named."""
    shape = list(x.shape)
    for dim in dims:
        if dim.input == position:
            shape[dim.dim] = dim.name
    return tuple(shape)


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
