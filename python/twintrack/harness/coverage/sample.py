"""The fixed breadth sample that `make test` runs (test_coverage_sample.py),
and its comparison with the committed expected statuses.

About fifty (op, dtype) cases, picked to touch every kind of lowering at
least once (elementwise at each dtype, reductions, scans, matmuls, convs,
views, concatenation, gathers, masks, casts) while staying cheap to compile.
A case that was expected to pass and does not is a regression; a case that
passes and was not expected to is an improvement, to be recorded with
`tools/coverage.py --update-expected`, which refuses to record a regression.
"""

from __future__ import annotations

import json
from pathlib import Path

from .at_commit import Refused

SAMPLE_CASES = (
    "abs:float32", "neg:int64", "exp:float16", "log:float32", "sigmoid:bfloat16", "tanh:float32",
    "rsqrt:float32", "add:int64", "add:bfloat16", "mul:int32", "sub:uint8", "div.no_rounding_mode:float32",
    "floor_divide:int64", "remainder:int32", "bitwise_and:int32", "logical_and:bool", "eq:int32",
    "clamp:float32", "where:float32", "nan_to_num:float16", "sum:float32", "mean:float16", "amax:int64",
    "argmax:float32", "max.reduction_with_dim:float32", "cumsum:float32", "softmax:float32",
    "nn.functional.layer_norm:float32", "mm:bfloat16", "bmm:float32", "nn.functional.conv2d:float32",
    "nn.functional.gelu:float32", "cat:bool", "stack:int64", "reshape:float32", "permute:uint8",
    "transpose:float16", "narrow:float32", "index_select:float32", "gather:float32", "masked_fill:float32",
    "sort:uint8", "pow:int64", "std_mean:float32", "max.reduction_no_dim:uint8", "digamma:float32",
    "linalg.inv:float32", "index_reduce.amax:float32", "searchsorted:int64",
)

EXPECTED_FILE = Path(__file__).resolve().parents[4] / "test" / "python" / "coverage_expected.json"


def load_expected(path: Path = EXPECTED_FILE) -> dict[str, str]:
    """case id -> expected status ('pass', 'fail', ...)."""
    return json.loads(path.read_text())["expected"] if path.is_file() else {}


def write_expected(statuses: dict[str, str], path: Path = EXPECTED_FILE) -> None:
    data = {"about": "expected statuses of the coverage sample (python/twintrack/coverage/sample.py); "
                     "refresh with tools/coverage.py --update-expected",
            "expected": dict(sorted(statuses.items()))}
    path.write_text(json.dumps(data, indent=1) + "\n")


def compare_with_expected(results: dict[str, dict], expected: dict[str, str]) -> tuple[list[str], list[str]]:
    """(regressions, newly passing): each a line per case, with the reason of a regression."""
    regressions, improvements = [], []
    for case_id, result in sorted(results.items()):
        was, now = expected.get(case_id), result["status"]
        if was == "pass" and now != "pass":
            regressions.append(f"{case_id}: expected pass, got {now}: {result['reason']}")
        elif now == "pass" and was != "pass":
            improvements.append(f"{case_id}: now passes (expected {was or 'nothing'})")
    return regressions, improvements


def updated_expected(results: dict[str, dict], expected: dict[str, str]) -> dict[str, str]:
    """The statuses to record after a run of the sample; refused if a case
    expected to pass does not (a downgrade is fixed, not recorded)."""
    regressions, _ = compare_with_expected(results, expected)
    if regressions:
        raise Refused("refusing to record a downgrade (fix it; a case that cannot pass is taken out of "
                      f"{EXPECTED_FILE.name} by hand, with the reason in the commit):\n  " + "\n  ".join(regressions))
    return {case_id: result["status"] for case_id, result in results.items()}
