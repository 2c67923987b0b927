"""The GPU half of the coverage suite, for the GPU machine: run each
artifact that `tools/coverage.py --gpu-artifacts DIR` wrote, on the very
sample it was compiled from (its coverage-sample.pt), and check it as the
CPU suite checks a CPU compile (`outputs.compare_outputs`).

This module imports no MLIR (twintrack.runtime and torch only), so it runs
where tools/gpu_check.py runs. A failing artifact does not stop the others;
a segfault does, so the run writes its report after every artifact.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .cases import NONDETERMINISTIC, values_at, with_column_signs_fixed
from .outputs import compare_outputs


def check_artifact(directory: Path) -> dict:
    """{'id', 'status', 'reason'} for one artifact directory."""
    import twintrack.runtime
    saved = torch.load(directory / "coverage-sample.pt", weights_only=False)
    try:
        model = twintrack.runtime.load(str(directory))
        arguments = [t.cuda() for t in saved.get("state", [])] + [t.cuda() for t in saved["inputs"]]
        with torch.no_grad():
            outputs = model.flat(*arguments)
        torch.cuda.synchronize()
    except Exception as e:
        return {"id": directory.name, "status": "fail", "reason": f"run: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    outputs = [o.cpu() for o in outputs]
    eager, reference = saved["eager"], saved["reference"]
    if saved.get("shape_only", directory.name.startswith(NONDETERMINISTIC)):  # random ops: shapes only
        outputs, eager, reference = ([torch.zeros_like(t) for t in ts] for ts in (outputs, eager, eager))
    verdict = judged(outputs, eager, reference, saved)
    return {"id": directory.name, "status": "pass" if verdict.ok else "fail", "reason": verdict.reason}


def judged(outputs: list, eager: list, reference: list | None, saved: dict):
    """The verdict on one artifact's outputs, with the CPU suite's rules for
    index outputs of unordered ties and for sign-free eigenvector columns."""
    verdict = compare_outputs(outputs, eager, reference)
    if not verdict.ok and saved.get("ties") is not None:  # sort, topk...: any order of equal values is right
        source, dim = saved["ties"]
        outputs, eager = ([values_at(source, dim, t) if t.dtype == torch.int64 else t for t in v]
                          for v in (outputs, eager))
        verdict = compare_outputs(outputs, eager, eager)
    if not verdict.ok and saved.get("sign_free_columns"):
        outputs, eager, reference = (None if v is None else with_column_signs_fixed(v, saved["sign_free_columns"])
                                     for v in (outputs, eager, reference))
        verdict = compare_outputs(outputs, eager, reference)
    return verdict


def check_directory(root: Path) -> int:
    """Check every artifact under `root`; write root/gpu-numerics.{json,md}. Exit 1 on a failure."""
    root = Path(root)
    directories = sorted(p.parent for p in root.glob("*/coverage-sample.pt"))
    results = []
    for index, directory in enumerate(directories, 1):
        results.append(check_artifact(directory))
        print(f"[{index}/{len(directories)}] {results[-1]['id']}: {results[-1]['status']} {results[-1]['reason']}", flush=True)
        _write(root, results, complete=index == len(directories))
    failed = sum(r["status"] != "pass" for r in results)
    print(f"{len(results) - failed}/{len(results)} pass on {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}")
    return 1 if failed else 0


def _write(root: Path, results: list[dict], complete: bool) -> None:
    (root / "gpu-numerics.json").write_text(json.dumps({"complete": complete, "results": results}, indent=1) + "\n")
    lines = ["# OpInfo coverage: GPU numerics", "", f"{'complete' if complete else 'PARTIAL'}; "
             f"{sum(r['status'] == 'pass' for r in results)}/{len(results)} pass", "",
             "| artifact | status | reason |", "|---|---|---|"]
    lines += [f"| {r['id']} | {r['status']} | {r['reason'].replace('|', '/')} |" for r in results]
    (root / "gpu-numerics.md").write_text("\n".join(lines) + "\n")
