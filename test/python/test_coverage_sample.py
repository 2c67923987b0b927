"""The OpInfo coverage suite on a fixed breadth sample (about fifty (op,
dtype) cases, python/twintrack/coverage/sample.py), against the statuses
committed in coverage_expected.json: a case expected to pass that does not
is a regression; a case that newly passes must be recorded (with
`tools/coverage.py --update-expected`, which refuses a regression).

The rules around it are tested here too, without compiling: the comparison
of outputs, the worker pool's crashes and timeouts, and a table that holds
one run at one commit.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from twintrack.harness.coverage import at_commit, cases, outputs, sample
from twintrack.harness.coverage.at_commit import Refused
from twintrack.harness.coverage.pool import Pool
from twintrack.harness.coverage.report import Store


def test_sample_matches_expected_statuses():
    expected = sample.load_expected()
    assert expected, f"{sample.EXPECTED_FILE} is missing: run tools/coverage.py --update-expected"
    results = {}
    Pool(jobs=2, timeout_s=150).run([{"case": c, "samples": 1} for c in sample.SAMPLE_CASES],
                                    lambda r: results.__setitem__(r["id"], r))
    assert set(results) == set(sample.SAMPLE_CASES)
    regressions, improvements = sample.compare_with_expected(results, expected)
    assert not regressions, "\n".join(regressions)
    assert not improvements, "record them with tools/coverage.py --update-expected:\n" + "\n".join(improvements)


def _results(**statuses) -> dict[str, dict]:
    return {case: {"id": case, "status": status, "reason": "r"} for case, status in statuses.items()}


def test_update_expected_records_improvements_and_refuses_a_downgrade():
    expected = {"a": "pass", "b": "fail"}
    assert sample.updated_expected(_results(a="pass", b="pass", c="fail"), expected) == {"a": "pass", "b": "pass",
                                                                                       "c": "fail"}
    with pytest.raises(Refused, match="downgrade"):
        sample.updated_expected(_results(a="fail", b="pass"), expected)


RUN = {"commit": "a" * 40, "dirty": False, "at_commit": True, "torch": "2.13.0+cpu", "target": "cpu",
       "samples": 2, "timeout_s": 120, "selection": {}}


def _table(tmp_path) -> Store:
    store = Store(tmp_path / "opinfo.json")
    store.claim(RUN)
    store.add({"id": "abs:float32", "status": "pass", "reason": "", "samples": []})
    store.save(complete=False)
    return Store.load(tmp_path / "opinfo.json")


def test_a_table_resumes_only_its_own_run(tmp_path):
    _table(tmp_path).claim(dict(RUN))  # the next chunk of the same run
    for other in ({**RUN, "commit": "b" * 40}, {**RUN, "dirty": True}, {**RUN, "samples": 1},
                  {**RUN, "selection": {"ops": "abs"}}):
        with pytest.raises(Refused, match="another run"):
            _table(tmp_path).claim(other)


def test_retry_marks_the_table_mixed(tmp_path):
    store = _table(tmp_path)
    store.claim(dict(RUN), retry=True)
    assert store.meta["retried"] and not store.meta["mixed"]
    store.claim({**RUN, "commit": "b" * 40}, retry=True)
    assert store.meta["mixed"] and store.meta["commit"] == "b" * 40


def test_committed_tables_come_only_from_a_run_at_a_commit(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "c"], check=True)
    with pytest.raises(Refused, match="--commit"):
        at_commit.run_source(repo, None, "tools/coverage.py", [], repo / "bench" / "coverage", repo / "bench" / "coverage")
    stamp, out_dir = at_commit.run_source(repo, None, "tools/coverage.py", [], None, repo / "bench" / "coverage")
    assert out_dir == repo / "out" / "coverage" and stamp == {"commit": at_commit.resolve(repo, "HEAD"),
                                                              "dirty": False, "at_commit": False}
    (repo / "new.py").write_text("")
    assert at_commit.stamp(repo)["dirty"]


FAKE_WORKER = """
import json, os, signal, sys, time
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    case = json.loads(line)["case"]
    if case == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if case == "hang":
        time.sleep(60)
    print(json.dumps({"id": case, "status": "pass", "reason": ""}), flush=True)
"""


def test_a_crash_or_a_hang_is_that_case_s_result_and_the_run_goes_on():
    results = {}
    pool = Pool(jobs=2, timeout_s=3, command=(sys.executable, "-c", FAKE_WORKER))
    pool.run([{"case": c} for c in ("a", "crash", "b", "hang", "c")], lambda r: results.__setitem__(r["id"], r))
    assert {c: r["reason"] or r["status"] for c, r in results.items()} == {
        "a": "pass", "b": "pass", "c": "pass", "crash": "crash (SIGSEGV)", "hang": "timeout after 3 s"}


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


def test_an_overflow_only_eager_has_may_be_the_exact_result():
    """Eager overflowed an intermediate (inf) where the exact result fits
    float16: the exact value passes, as does eager's inf; a wrong value, or
    a finite value where the exact result overflows too, does not."""
    inf = float("inf")
    eager = torch.tensor([inf, 1.0, inf], dtype=torch.float16)
    reference = torch.tensor([7e4, 1.0, 50.0], dtype=torch.float64)
    half = (lambda *v: torch.tensor(v, dtype=torch.float16))
    assert outputs.compare_outputs(half(inf, 1.0, 50.0), eager, reference).ok
    assert outputs.compare_outputs(half(inf, 1.0, inf), eager, reference).ok
    assert not outputs.compare_outputs(half(inf, 1.0, 60.0), eager, reference).ok
    assert not outputs.compare_outputs(half(6e4, 1.0, 50.0), eager, reference).ok


def test_eigenvector_signs_are_free():
    columns = torch.tensor([[0.6, -0.8], [0.8, 0.6]])
    flipped = columns * torch.tensor([-1.0, 1.0])
    assert not torch.equal(columns, flipped)
    fixed, fixed_flipped = (cases.with_column_signs_fixed([c], (0,))[0] for c in (columns, flipped))
    assert torch.equal(fixed, fixed_flipped)


def test_seed_check_compares_complex_half_and_sparse_outputs():
    """The check for outputs that change with the seed reads every layout
    and dtype an op returns (torch.equal has no complex-half or sparse
    kernel: those cases failed as 'internal')."""
    from twintrack.harness.coverage.runner import _same_values
    z = torch.complex(torch.ones(3), torch.zeros(3)).to(torch.complex32)
    assert _same_values(z, z.clone()) and not _same_values(z, z * 2)
    sparse = torch.eye(3).to_sparse()
    assert _same_values(sparse, sparse.clone())
    assert _same_values(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]))


def test_integers_are_exact():
    x = torch.tensor([1, 2, 3])
    assert outputs.compare_outputs(x.clone(), x).ok
    verdict = outputs.compare_outputs(x + torch.tensor([0, 0, 1]), x)
    assert not verdict.ok and "1/3" in verdict.reason
    assert not outputs.compare_outputs(x.int(), x).ok  # dtype differs


def test_signal_names():
    from twintrack.harness.coverage.pool import death_reason
    assert death_reason(-11) == "crash (SIGSEGV)"
    assert death_reason(-6) == "crash (SIGABRT)"
    assert death_reason(3) == "crash (exit 3)"


@pytest.mark.parametrize("reason", ["crash (SIGSEGV)", "timeout after 300 s"])
def test_reason_signature_keeps_crashes_apart(reason):
    from twintrack.harness.coverage.report import reason_signature
    assert reason_signature(reason).split()[0] == reason.split()[0]
    assert not math.isnan(len(reason_signature(reason)))


def test_gpu_check_accepts_any_order_of_ties():
    """On the GPU machine an argsort of bools (two values, many ties) is
    judged as on the CPU: by the values its indices address."""
    from twintrack.harness.coverage.gpu_numerics import judged
    source = torch.tensor([True, False, True, False])
    eager, ours = torch.tensor([1, 3, 0, 2]), torch.tensor([3, 1, 2, 0])
    assert not judged([ours], [eager], None, {}).ok
    assert judged([ours], [eager], None, {"ties": (source, -1)}).ok
    assert not judged([torch.tensor([0, 1, 2, 3])], [eager], None, {"ties": (source, -1)}).ok
