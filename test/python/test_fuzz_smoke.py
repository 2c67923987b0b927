"""The differential fuzzer: its generated graphs are valid and reproducible,
its shrinking finds small graphs (with a fake checker, no compile), and a
short real campaign (about twenty graphs through a worker subprocess) runs
end to end. Bugs the campaign finds in the compiler do not fail this test:
they are what tools/fuzz.py reports. A bug in the fuzzer itself does."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings

from twintrack.fuzz.campaign import Campaign, write_report
from twintrack.fuzz.check import load_source
from twintrack.fuzz.graphs import graph_sources

QUICK = settings(max_examples=30, database=None, deadline=None, suppress_health_check=list(HealthCheck))


@QUICK
@given(graph_sources())
def test_generated_graphs_run_in_eager_and_reproduce(source):
    module, inputs = load_source(source)
    again_module, again = load_source(source)
    with torch.no_grad():
        first, second = module(*inputs), again_module(*again)
    for x, y in zip(torch.utils._pytree.tree_leaves(first), torch.utils._pytree.tree_leaves(second)):
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
    from twintrack.coverage.pool import Pool
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
    json_path, md_path = write_report(campaign.report("cpu"), tmp_path)
    assert json_path.is_file() and "Differential fuzzing" in md_path.read_text()
