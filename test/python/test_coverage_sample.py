"""The OpInfo coverage suite on a fixed breadth sample (about fifty (op,
dtype) cases, python/twintrack/coverage/sample.py), against the statuses
committed in coverage_expected.json: a case expected to pass that does not
is a regression and fails the test; a case that newly passes is only
reported (refresh the file with `tools/coverage.py --update-expected`).

The comparison rules themselves are tested here too, without compiling.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from twintrack.coverage import cases, outputs, sample
from twintrack.coverage.pool import Pool


def test_sample_matches_expected_statuses():
    expected = sample.load_expected()
    assert expected, f"{sample.EXPECTED_FILE} is missing: run tools/coverage.py --update-expected"
    results = {}
    Pool(jobs=2, timeout_s=150).run([{"case": c, "samples": 1} for c in sample.SAMPLE_CASES],
                                    lambda r: results.__setitem__(r["id"], r))
    assert set(results) == set(sample.SAMPLE_CASES)
    regressions, improvements = sample.compare_with_expected(results, expected)
    for line in improvements:
        warnings.warn(f"coverage sample improved: {line} (tools/coverage.py --update-expected)")
    assert not regressions, "\n".join(regressions)


def test_case_ids_round_trip():
    for case_id in ("abs:float32", "nn.functional.conv2d:bfloat16", "module:nn.BatchNorm2d.train:float32",
                    "div.floor_rounding:int64"):
        assert cases.Case.parse(case_id).id == case_id


def test_sample_cases_exist_at_their_dtypes():
    index = cases.op_index()
    for case_id in sample.SAMPLE_CASES:
        case = cases.Case.parse(case_id)
        assert case.dtype in cases.cpu_dtypes(index[case.name]), case_id


def test_outputs_flatten_any_structure():
    a, b = torch.ones(2), torch.zeros(3)
    same = outputs.compare_outputs((a, [b]), {"x": a, "y": (b,)})
    assert same.ok
    assert not outputs.compare_outputs(a, (a, b)).ok  # a missing output


def test_float_tolerance_and_nan_pattern():
    ref = torch.tensor([1.0, 2.0, float("nan")], dtype=torch.float64)
    eager = ref.float()
    assert outputs.compare_outputs(eager + 1e-7, eager, ref).ok
    assert not outputs.compare_outputs(eager + 1e-2, eager, ref).ok
    moved_nan = torch.tensor([float("nan"), 2.0, 3.0])
    verdict = outputs.compare_outputs(moved_nan, eager, ref)
    assert not verdict.ok and "NaN" in verdict.reason


def test_no_worse_than_eager_passes_in_half_precision():
    ref = torch.tensor([1.0 / 3.0], dtype=torch.float64) * 1000
    eager = ref.half()
    assert outputs.compare_outputs(eager.clone(), eager, ref).ok
    assert not outputs.compare_outputs(eager + 5, eager, ref).ok


def test_integers_are_exact():
    x = torch.tensor([1, 2, 3])
    assert outputs.compare_outputs(x.clone(), x).ok
    verdict = outputs.compare_outputs(x + torch.tensor([0, 0, 1]), x)
    assert not verdict.ok and "1/3" in verdict.reason
    assert not outputs.compare_outputs(x.int(), x).ok  # dtype differs


def test_signal_names():
    from twintrack.coverage.pool import death_reason
    assert death_reason(-11) == "crash (SIGSEGV)"
    assert death_reason(-6) == "crash (SIGABRT)"
    assert death_reason(3) == "crash (exit 3)"


@pytest.mark.parametrize("reason", ["crash (SIGSEGV)", "timeout after 300 s"])
def test_reason_signature_keeps_crashes_apart(reason):
    from twintrack.coverage.report import reason_signature
    assert reason_signature(reason).split()[0] == reason.split()[0]
    assert not math.isnan(len(reason_signature(reason)))
