"""The differential fuzzer: its generated graphs are valid and reproducible,
its shrinking finds small graphs (with a fake checker, no compile), chunks
add up to one campaign only at one commit and with distinct seeds, and a
short real campaign (about twenty graphs through a worker subprocess) runs
end to end. Bugs the campaign finds in the compiler do not fail this test:
they are what tools/fuzz.py reports. A bug in the fuzzer itself does."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from twintrack.harness.coverage.at_commit import Refused
from twintrack.harness.fuzz.campaign import Campaign, complete, merge_chunk, pending_chunks, write_report
from twintrack.harness.fuzz.check import load_source
from twintrack.harness.fuzz.graphs import graph_sources

QUICK = settings(max_examples=30, database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@QUICK
@given(graph_sources())
def test_generated_graphs_run_in_eager_and_reproduce(source):
    module, inputs = load_source(source)
    again_module, again = load_source(source)
    with torch.no_grad():
        first, second = module(*inputs), again_module(*again)
    for x, y in zip(torch.utils._pytree.tree_leaves(first), torch.utils._pytree.tree_leaves(second), strict=True):
        assert torch.equal(x, y) or (x.is_floating_point() and torch.equal(x.isnan(), y.isnan()))


def _fake_checker(source: str) -> dict:
    """Fails on every graph with a cumsum: the minimal failing graph has one or two ops."""
    if "torch.cumsum(" in source:
        return {"status": "fail", "kind": "compile", "reason": "compile: stage 'linalg' failed: cumsum"}
    return {"status": "pass", "kind": "", "reason": ""}


def test_shrinks_to_a_small_graph():
    campaign = Campaign(_fake_checker, examples=150, seed=3, shrink_budget=500).run()
    assert campaign.failures, "150 graphs and not one cumsum"
    failure = campaign.failures[0]
    assert failure["kind"] == "compile" and failure["ops"] <= 3, failure["source"]
    assert "torch.cumsum(" in failure["source"]


def test_smoke_campaign(tmp_path):
    from twintrack.harness.coverage.pool import Pool
    pool = Pool(1, timeout_s=120)
    counter = iter(range(1 << 30))

    def check(source):
        return pool.call({"case": f"fuzz:{next(counter)}", "fuzz": source, "target": "cpu"})
    try:
        campaign = Campaign(check, examples=20, seed=7, shrink_budget=4).run()
    finally:
        pool.close()
    assert 10 <= campaign.explored <= 20   # hypothesis may draw a graph twice (cached, not counted)
    assert campaign.statuses["skip"] < 10, campaign.statuses   # the generator makes eager-valid graphs
    internal = [s for s in campaign.seen if s.startswith("internal")]
    assert not internal, internal                                 # the checker's own exceptions
    report = merge_chunk(None, RUN, campaign.chunk())
    json_path, md_path = write_report(report, tmp_path, budget=20)
    assert json_path.is_file() and "Differential fuzzing" in md_path.read_text()
    assert len(report["chunks"][0]["compile_s"]) >= campaign.statuses["pass"]  # a compile time per graph that ran


RUN = {"commit": "a" * 40, "dirty": False, "at_commit": True, "torch": "2.13.0+cpu", "target": "cpu",
       "ops": [3, 12], "shrink_budget": 40, "timeout_s": 120}


def _chunk(seed: int, examples: int = 50, done: bool = True, signature: str = "mismatch: x") -> dict:
    failure = {"kind": "mismatch", "signature": signature, "first_signature": signature, "reason": "x",
               "source": "", "ops": 1, "seed": seed}
    return {"seed": seed, "examples": examples, "budget": examples, "complete": done, "seconds": 60.0,
            "statuses": {"pass": examples - 1, "fail": 1}, "signatures": {signature: 1},
            "compile_s": [0.5] * examples, "failures": [failure]}


def test_chunks_of_one_commit_add_up_to_one_campaign():
    report = merge_chunk(merge_chunk(None, RUN, _chunk(0)), RUN, _chunk(1, signature="compile: y"))
    assert report["meta"]["examples"] == 100 and report["statuses"] == {"pass": 98, "fail": 2}
    assert [f["seed"] for f in report["failures"]] == [0, 1]
    assert complete(report, 100) and not complete(report, 150)
    again = merge_chunk(report, RUN, _chunk(2))  # the same bug found again: one minimal graph
    assert len(again["failures"]) == 2 and again["signatures"]["mismatch: x"] == 2


def test_a_chunk_of_another_commit_or_options_is_refused():
    report = merge_chunk(None, RUN, _chunk(0))
    for other in ({**RUN, "commit": "b" * 40}, {**RUN, "dirty": True}, {**RUN, "ops": [3, 6]}):
        with pytest.raises(Refused, match="another run"):
            merge_chunk(report, other, _chunk(1))


def test_a_seed_counts_once():
    report = merge_chunk(None, RUN, _chunk(0, examples=20, done=False))  # a stopped chunk is run again whole
    report = merge_chunk(report, RUN, _chunk(0))
    assert report["meta"]["examples"] == 50 and len(report["chunks"]) == 1
    with pytest.raises(Refused, match="seed 0"):
        merge_chunk(report, RUN, _chunk(0))


def test_pending_chunks_skip_complete_seeds():
    assert pending_chunks(None, 120, 50, first_seed=10) == [(10, 50), (11, 50), (12, 20)]
    report = merge_chunk(merge_chunk(None, RUN, _chunk(10)), RUN, _chunk(11, done=False))
    assert pending_chunks(report, 120, 50, first_seed=10) == [(11, 50), (12, 20)]


def test_a_chunk_explores_its_whole_budget():
    """hypothesis starts each round from the simplest graph, which an
    earlier round drew: a chunk of 50 explored 49 distinct graphs."""
    def passing(source):
        return {"status": "pass", "reason": "", "compile_s": 0.0}
    campaign = Campaign(passing, examples=50, seed=0).run()
    assert campaign.explored == 50 and campaign.statuses["pass"] == 50
