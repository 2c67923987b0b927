"""One coverage case, in this process: its samples compiled as a user
compiles them (`twintrack.compile`, nothing more lenient) and checked
against eager. `pool` runs this in worker subprocesses; the test and a
debugging session can call it directly.

Per sample, the status is one of
- pass: the compiled outputs match eager (see `outputs`);
- fail: a mismatch, a compile error, an error running the compiled code, or
  an internal (non-twintrack) exception; `reason` says which in one line;
- unsupported: twintrack refused it cleanly, with an error that says so;
- export: torch.export itself rejects the module, strict=False and
  strict=True both (not twintrack's fault, not counted against it);
- skip: eager PyTorch itself fails on the sample.
A case's status is its worst sample's (fail > unsupported > pass > export > skip).
Each sample records its compile time (`twintrack.compile`, export
included); a case, its slowest sample's.
"""

from __future__ import annotations

import re
import time
import traceback
import warnings
from pathlib import Path

import torch

from . import cases as case_lib
from .outputs import Verdict, compare_outputs, tensor_leaves

STATUS_ORDER = ("fail", "unsupported", "pass", "export", "skip")
UNSUPPORTED = re.compile(r"not supported|unsupported|not implemented", re.IGNORECASE)


def first_line(text: str, limit: int = 200) -> str:
    """The first non-empty line of an error, clipped: what a table row can hold."""
    line = next((l.strip() for l in str(text).splitlines() if l.strip()), "")
    line = " ".join(line.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def exception_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {first_line(error)}"


def torch_export_rejects(module, inputs) -> str | None:
    """Why torch.export rejects the module in both modes, or None when one accepts it."""
    reasons = []
    for strict in (False, True):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.export.export(module, inputs, strict=strict)
            return None
        except Exception as e:  # torch raises many types here
            reasons.append(exception_line(e))
    return reasons[0]


def _clone(inputs: tuple) -> tuple:
    return tuple(t.clone() for t in inputs)


def user_compile(module, inputs, target: str = "cpu"):
    """What a user gets from `twintrack.compile(module, inputs, target=...)`,
    timed (export included): (compiled, None, seconds), or (None, (status,
    reason), seconds) for a sample it does not compile. A failure to export
    is 'export' (not twintrack's) only when torch.export rejects the module
    in both of its modes."""
    import twintrack
    from twintrack.errors import ModelLoadError
    started = time.perf_counter()
    try:
        compiled = twintrack.compile(module, inputs, target=target)
        compiled.poison_outputs = True  # an output element the program never writes fails the check
    except Exception as e:
        seconds = round(time.perf_counter() - started, 3)
        status, reason = compile_error_status(e)
        if isinstance(e, ModelLoadError) and "torch.export failed" in reason:
            rejected = torch_export_rejects(module, inputs)
            status, reason = ("export", rejected) if rejected else (status, "export: " + first_line(e.one_line()))
        return None, (status, reason), seconds
    return compiled, None, round(time.perf_counter() - started, 3)


def compile_error_status(error: BaseException) -> tuple[str, str]:
    """(status, reason) for an exception out of twintrack's compile."""
    from twintrack.errors import TwintrackError
    if isinstance(error, TwintrackError):
        line = first_line(error.one_line())
        return ("unsupported" if UNSUPPORTED.search(line) else "fail"), f"compile: {line}"
    return "fail", f"compile internal: {exception_line(error)}"


def run_sample(case: case_lib.Case, sample: case_lib.Sample, target: str = "cpu",
               artifact_dir: Path | None = None) -> dict:
    """Export, compile and check one sample; a dict for the report."""
    record = {"sample": sample.description, "status": "pass", "reason": "", "compile_s": None}
    try:
        with torch.no_grad():
            eager = sample.module(*_clone(sample.inputs))
    except Exception as e:
        return {**record, "status": "skip", "reason": f"eager: {exception_line(e)}"}
    shape_only = case.shape_only or _changes_with_the_seed(sample, eager)
    if shape_only and not case.shape_only:
        record["shape_only"] = True
    compiled, failure, record["compile_s"] = user_compile(sample.module, sample.inputs, target)
    if failure:
        return {**record, "status": failure[0], "reason": failure[1]}
    if target != "cpu":
        if artifact_dir is not None:
            ties = case_lib.tie_axis(case, sample) if case.ties_unordered else None
            save_gpu_artifact(compiled, sample, eager, artifact_dir, shape_only, case.sign_free_columns, ties)
        return record
    return {**record, **check_compiled(case, sample, compiled, eager, shape_only)}


def _changes_with_the_seed(sample: case_lib.Sample, eager) -> bool:
    """Whether eager's outputs depend on the random state (dropout in
    training mode inside another op, a random op the case list misses):
    such a sample is compared by shapes and dtypes only."""
    with torch.random.fork_rng(devices=[]), torch.no_grad(), case_lib.reseeding_differently():
        torch.manual_seed(torch.initial_seed() + 1)
        try:
            again = sample.module(*_clone(sample.inputs))
        except Exception:
            return False
    first, second = tensor_leaves(eager), tensor_leaves(again)
    try:
        return len(first) != len(second) or not all(_same_values(a, b) for a, b in zip(first, second))
    except Exception:  # outputs this check cannot compare (a layout or dtype torch.equal lacks): values are judged
        return False


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and values, NaN equal to NaN; sparse and complex outputs too."""
    a, b = (t.to_dense() if t.layout != torch.strided else t for t in (a, b))
    a, b = (torch.view_as_real(t.resolve_conj()).float() if t.is_complex() else t for t in (a, b))
    return a.shape == b.shape and torch.equal(a.nan_to_num(0.0) if a.is_floating_point() else a,
                                              b.nan_to_num(0.0) if b.is_floating_point() else b)


def check_compiled(case: case_lib.Case, sample: case_lib.Sample, compiled, eager, shape_only: bool = False) -> dict:
    """Run the compiled sample and compare it with eager (float64 where there is one)."""
    try:
        with torch.no_grad():
            actual = compiled(*_clone(sample.inputs))
    except Exception as e:
        return {"status": "fail", "reason": f"run: {exception_line(e)}"}
    if shape_only:
        eager = [torch.zeros_like(t) for t in tensor_leaves(eager)]
        actual = [torch.zeros_like(t) for t in tensor_leaves(actual)]
    reference = float64_outputs(sample)
    verdict = compare_outputs(actual, eager, reference)
    if not verdict.ok and case.sign_free_columns:
        actual, eager, reference = (None if v is None else case_lib.with_column_signs_fixed(tensor_leaves(v),
                                                                                           case.sign_free_columns)
                                    for v in (actual, eager, reference))
        verdict = compare_outputs(actual, eager, reference)
    if not verdict.ok and case.ties_unordered:
        verdict = _compare_with_any_tie_order(case, sample, actual, eager)
    return {"status": "pass" if verdict.ok else "fail", "reason": verdict.reason,
            "max_abs_error": verdict.max_abs_error}


def _compare_with_any_tie_order(case: case_lib.Case, sample: case_lib.Sample, actual, eager):
    """An unordered-ties op: its values as eager's, its indices checked by
    the values they address (case_lib.indices_address_values). argsort
    returns indices only: they must address the values eager's address."""
    ys, es = tensor_leaves(actual), tensor_leaves(eager)
    if sample.module.arguments(*sample.inputs)[1].get("stable"):  # eager's order is defined: it must match
        return compare_outputs(actual, eager)
    if len(ys) == len(es) == 1 and ys[0].dtype == es[0].dtype == torch.int64:
        expected = case_lib.addressed_values(case, sample, es[0])
        if case_lib.indices_address_values(case, sample, ys[0], expected):
            return Verdict(True)
    elif len(ys) == len(es) == 2:
        reference = tensor_leaves(float64_outputs(sample))[:1] or None
        verdict = compare_outputs(ys[:1], es[:1], reference)
        if verdict.ok and case_lib.indices_address_values(case, sample, ys[1], ys[0]):
            return verdict
    return compare_outputs(actual, eager)


def float64_outputs(sample: case_lib.Sample):
    """The float64 eager outputs, or None where the op has none (or it fails)."""
    if sample.module64 is None:
        return None
    try:
        with torch.no_grad():
            return sample.module64(*_clone(sample.inputs64))
    except Exception:
        return None


def save_gpu_artifact(compiled, sample: case_lib.Sample, eager, outdir: Path, shape_only: bool = False,
                      sign_free_columns: tuple = (), ties: tuple | None = None) -> None:
    """The GPU artifact plus what checks it without MLIR: the sample's
    inputs, eager's outputs and the float64 ones (tools/coverage.py
    --check-gpu-artifacts reads them on the GPU machine)."""
    from twintrack.frontend.export import model_state
    compiled.save(outdir)
    reference = float64_outputs(sample)
    state = [] if compiled.exported.exported.frozen else list(model_state(compiled.exported.source.module).values())
    torch.save({"shape_only": shape_only, "sign_free_columns": tuple(sign_free_columns), "ties": ties, "state": state, "inputs": list(sample.inputs), "eager": tensor_leaves(eager),
                "reference": tensor_leaves(reference) if reference is not None else None},
               outdir / "coverage-sample.pt")


def aggregate(samples: list[dict]) -> tuple[str, str]:
    """A case's status and reason: its worst sample's."""
    if not samples:
        return "skip", "no samples"
    worst = min(samples, key=lambda s: STATUS_ORDER.index(s["status"]))
    return worst["status"], worst["reason"]


def run_case(case_id: str, limit: int = 2, target: str = "cpu", artifact_root: str | None = None) -> dict:
    """Every sample of one case (at most `limit`); the case's report entry."""
    case = case_lib.Case.parse(case_id)
    started = time.perf_counter()
    try:
        sample_list = case_lib.samples(case, limit)
    except Exception as e:
        return {"id": case_id, "status": "skip", "reason": f"samples: {exception_line(e)}", "samples": []}
    records = []
    for index, sample in enumerate(sample_list):
        artifact_dir = _artifact_dir(artifact_root, case_id, index)
        try:
            records.append(run_sample(case, sample, target, artifact_dir))
        except Exception as e:  # a bug here must not hide the other cases
            records.append({"sample": sample.description, "status": "fail",
                            "reason": f"internal: {exception_line(e)}", "trace": traceback.format_exc()[-800:]})
    status, reason = aggregate(records)
    times = [r["compile_s"] for r in records if r.get("compile_s") is not None]
    return {"id": case_id, "status": status, "reason": reason, "samples": records,
            "compile_s": max(times) if times else None,
            "wall_s": round(time.perf_counter() - started, 3)}


def artifact_name(case_id: str, index: int) -> str:
    """A directory name for a case's sample: no characters a shell minds."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id) + f"-s{index}"


def _artifact_dir(root: str | None, case_id: str, index: int) -> Path | None:
    return None if root is None else Path(root) / artifact_name(case_id, index)
