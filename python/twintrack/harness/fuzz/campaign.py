"""A differential fuzzing campaign: hypothesis draws graphs (graphs.py),
each is checked in a coverage worker subprocess (check.py through
coverage.pool), and every new kind of failure is shrunk to a minimal
graph, kept as Python source.

Hypothesis stops generating at its first failure, so a campaign runs in
rounds: a round raises only for a failure whose signature (kind + reason
with particulars blanked) is new, hypothesis shrinks it, the minimal graph
is recorded, its signature becomes known, and the next round goes on with
the rest of the example budget. A failure with a known signature is only
counted. Shrinking costs a compile per candidate, so each round's shrink
has a budget of compiles; past it, unseen candidates count as passing
(results are cached by source, so hypothesis never sees an example change
its mind).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from twintrack.harness.coverage.at_commit import Refused
from twintrack.harness.coverage.report import percentile, reason_signature, refuse_other_run

from .graphs import graph_sources

Checker = Callable[[str], dict]  # source -> {'status', 'kind', 'reason', ...}


class FuzzFailure(Exception):
    """A graph twintrack gets wrong; one subclass per kind, so hypothesis
    shrinks each kind as its own bug."""


KINDS = {kind: type(f"Fuzz{kind.title().replace('-', '')}", (FuzzFailure,), {})
         for kind in ("mismatch", "compile", "run", "crash", "timeout", "export", "internal")}


def failure_kind(result: dict) -> str | None:
    """The kind of a failing result, or None for pass/skip/export/unsupported."""
    if result["status"] != "fail":
        return None
    if result["reason"].startswith("crash"):
        return "crash"
    if result["reason"].startswith("timeout"):
        return "timeout"
    return result.get("kind") or "internal"


def signature(result: dict) -> str:
    return f"{failure_kind(result)}: {reason_signature(result['reason'])}"


@dataclass
class Campaign:
    checker: Checker
    examples: int = 100
    seed: int = 0
    min_ops: int = 3
    max_ops: int = 12
    shrink_budget: int = 40
    on_example: Callable[[dict], None] | None = None
    after_round: Callable[["Campaign"], None] | None = None
    cache: dict[str, dict] = field(default_factory=dict)
    statuses: Counter = field(default_factory=Counter)
    seen: Counter = field(default_factory=Counter)          # signature -> examples failing with it
    failures: list[dict] = field(default_factory=list)      # the shrunk ones
    compile_times: list[float] = field(default_factory=list)  # twintrack.compile of each explored graph
    explored: int = 0

    def run(self) -> "Campaign":
        """Rounds until the example budget is spent (or a round finds nothing new)."""
        round_index = 0
        while self.explored < self.examples:
            before = self.explored
            found = self._round(round_index)
            round_index += 1
            if self.after_round:
                self.after_round(self)
            if not found and self.explored == before:
                break
        return self

    def _round(self, index: int) -> bool:
        state = {"shrinking": False, "compiles": 0, "latest": {}, "first": {}}

        # a round's first draws repeat earlier rounds' (hypothesis starts
        # from the simplest graph): each later round asks one more per round
        @settings(max_examples=max(1, self.examples - self.explored) + index, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        @hypothesis_seed(self.seed * 1000 + index)
        @given(graph_sources(self.min_ops, self.max_ops))
        def example(source: str) -> None:
            result = self._check(source, state)
            if result is None:
                return
            kind = failure_kind(result)
            if kind and signature(result) not in self.seen_known:
                state["shrinking"] = True
                state["latest"][kind] = (source, result)
                state["first"].setdefault(kind, signature(result))
                raise KINDS[kind](result["reason"])

        self.seen_known = {f["signature"] for f in self.failures} | {f["first_signature"] for f in self.failures}
        try:
            example()
        except FuzzFailure:
            pass
        except Exception as error:  # an ExceptionGroup of several kinds, or hypothesis giving up
            if not state["latest"]:
                raise error
        for kind, (source, result) in state["latest"].items():
            source, result = tighten(source, result, self.checker)
            self.failures.append({"kind": kind, "signature": signature(result), "first_signature": state["first"][kind],
                                  "reason": result["reason"], "source": source, "ops": source_ops(source)})
        return bool(state["latest"])

    def _check(self, source: str, state: dict) -> dict | None:
        """The (cached) result of one graph; None for a shrink candidate past the budget."""
        if source in self.cache:
            return self.cache[source]
        if state["shrinking"]:
            if state["compiles"] >= self.shrink_budget:
                return None
            state["compiles"] += 1
        elif self.explored >= self.examples:  # the chunk's budget is spent
            return None
        else:
            self.explored += 1
        result = self.checker(source)
        self.cache[source] = result
        if not state["shrinking"]:
            self.statuses[result["status"]] += 1
            if result.get("compile_s") is not None:
                self.compile_times.append(result["compile_s"])
            if failure_kind(result):
                self.seen[signature(result)] += 1
            if self.on_example:
                self.on_example({**result, "n": self.explored})
        return result

    def chunk(self, complete: bool = True, seconds: float | None = None) -> dict:
        """This campaign as one chunk of a larger one (merge_chunk)."""
        return {"seed": self.seed, "examples": self.explored, "budget": self.examples, "complete": complete,
                "seconds": seconds, "statuses": dict(self.statuses), "signatures": dict(self.seen.most_common()),
                "compile_s": self.compile_times,
                "failures": [{**f, "seed": self.seed} for f in self.failures]}


def _forward_parts(source: str):
    """(lines before the ops, op lines, the return line, lines after) of a graph's source."""
    lines = source.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("    def forward"))
    ret = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("return "))
    return lines[:start + 1], lines[start + 1:ret], lines[ret], lines[ret + 1:]


def without_dead_ops(source: str, outputs: list[str]) -> str:
    """The graph returning only `outputs`, with the ops they do not need removed."""
    head, ops, _, tail = _forward_parts(source)
    needed, kept = set(outputs), []
    for line in reversed(ops):
        name, expression = line.strip().split(" = ", 1)
        if name in needed:
            needed.update(re.findall(r"\b[vx]\d+\b", expression))
            kept.append(line)
    returned = outputs[0] if len(outputs) == 1 else "(" + ", ".join(outputs) + ",)"
    return "\n".join(head + kept[::-1] + [f"        return {returned}"] + tail) + "\n"


def returned_names(source: str) -> list[str]:
    return re.findall(r"\b[vx]\d+\b", _forward_parts(source)[2])


def tighten(source: str, result: dict, checker: Checker) -> tuple[str, dict]:
    """After hypothesis' shrink: keep one output at a time and drop the ops it
    does not need, while the graph still fails the same way (a compile per try)."""
    kind = failure_kind(result)
    outputs = returned_names(source)
    for candidate in [[o] for o in reversed(outputs)] if len(outputs) > 1 else [outputs]:
        smaller = without_dead_ops(source, candidate)
        if smaller == source:
            continue
        try:
            smaller_result = checker(smaller)
        except Exception:
            continue
        if failure_kind(smaller_result) == kind:
            return smaller, smaller_result
    return source, result


def source_ops(source: str) -> int:
    """How many ops a graph's forward holds."""
    return sum(1 for line in source.splitlines() if line.strip().startswith("v") and " = " in line)


# What makes chunks one campaign: the source, and every option a result depends on.
RUN_KEYS = ("commit", "dirty", "at_commit", "torch", "target", "ops", "shrink_budget", "timeout_s")


def merge_chunk(report: dict | None, run: dict, chunk: dict) -> dict:
    """The campaign `report` (None: a new one for `run`, a dict holding
    RUN_KEYS) with `chunk` added. Refused for a chunk of another run or a
    seed the campaign already holds complete; an incomplete chunk of the
    seed (a stopped run) is replaced."""
    report = report or {"meta": {k: run.get(k) for k in RUN_KEYS}, "chunks": []}
    refuse_other_run(report["meta"], run, RUN_KEYS, "the fuzz campaign")
    old = next((c for c in report["chunks"] if c["seed"] == chunk["seed"]), None)
    if old and old["complete"]:
        raise Refused(f"seed {chunk['seed']} is already in the campaign: each chunk takes a new seed")
    chunks = [c for c in report["chunks"] if c["seed"] != chunk["seed"]] + [chunk]
    return summarize(report["meta"], sorted(chunks, key=lambda c: c["seed"]))


def summarize(meta: dict, chunks: list[dict]) -> dict:
    """The campaign's totals over its chunks; a failure signature shrunk in
    several chunks is kept once, from the first."""
    statuses, signatures, failures = Counter(), Counter(), {}
    for c in chunks:
        statuses.update(c["statuses"])
        signatures.update(c["signatures"])
        for f in c["failures"]:
            failures.setdefault(f["signature"], f)
    times = [t for c in chunks for t in c["compile_s"]]
    totals = {"examples": sum(c["examples"] for c in chunks), "seconds": round(sum(c["seconds"] or 0 for c in chunks), 1),
              "compile_s": {"p50": percentile(times, 0.5), "p90": percentile(times, 0.9), "max": max(times, default=None)},
              "updated": time.strftime("%Y-%m-%d %H:%M:%S")}
    return {"meta": {**meta, **totals}, "chunks": chunks, "statuses": dict(statuses),
            "signatures": dict(signatures.most_common()), "failures": list(failures.values())}


def pending_chunks(report: dict | None, examples: int, size: int, first_seed: int = 0) -> list[tuple[int, int]]:
    """(seed, graphs) of the chunks a campaign of `examples` graphs still
    needs: chunk i has `size` graphs (the last one the rest) and seed
    first_seed + i; the seeds the campaign holds complete are done."""
    done = {c["seed"] for c in (report or {}).get("chunks", []) if c["complete"]}
    plan = [(first_seed + i, min(size, examples - start)) for i, start in enumerate(range(0, examples, size))]
    return [(seed, graphs) for seed, graphs in plan if seed not in done]


def complete(report: dict, budget: int) -> bool:
    """Whether every chunk finished and together they explored `budget` graphs."""
    return all(c["complete"] for c in report["chunks"]) and report["meta"]["examples"] >= budget


def load_report(out_dir: Path) -> dict | None:
    path = out_dir / "report.json"
    return json.loads(path.read_text()) if path.is_file() else None


def write_report(report: dict, out_dir: Path, budget: int) -> tuple[Path, Path]:
    """out_dir/report.json and report.md, each written whole."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report["meta"].update(budget=budget, complete=complete(report, budget))
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    for path, text in ((json_path, json.dumps(report, indent=1) + "\n"), (md_path, markdown(report))):
        staging = path.with_suffix(path.suffix + ".tmp")
        staging.write_text(text)
        os.replace(staging, path)
    return json_path, md_path


def markdown(report: dict) -> str:
    meta, chunks = report["meta"], report["chunks"]
    state = "complete" if meta["complete"] else "**PARTIAL**"
    seeds = ", ".join(f"{c['seed']}{'' if c['complete'] else ' (stopped)'}" for c in chunks)
    source = f"commit {meta['commit'][:12]}" + (" with uncommitted changes" if meta["dirty"] else "")
    source += " (from a worktree of it)" if meta["at_commit"] else " (from a live checkout)"
    lines = [f"# Differential fuzzing: twintrack vs eager ({meta['target']})", "",
             f"{state}: {meta['examples']} examples (budget {meta['budget']}) at {source}, in {len(chunks)} "
             f"chunk(s) of seeds {seeds}; {meta['ops'][0]}-{meta['ops'][1]} ops per graph, "
             f"{meta['seconds'] / 60:.0f} min; updated {meta['updated']}.", "",
             "Compile time per graph (s; twintrack.compile, export included): "
             + ", ".join(f"{k} {v}" for k, v in meta["compile_s"].items()),
             "", "Statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(report["statuses"].items())), "",
             "## Failure signatures (examples failing with each)", "", "| examples | signature |", "|---|---|"]
    lines += [f"| {n} | {s.replace('|', '/')} |" for s, n in report["signatures"].items()]
    lines += ["", "## Minimal failing graphs (shrunk)", ""]
    for index, failure in enumerate(report["failures"], 1):
        lines += [f"### {index}. {failure['kind']}: {failure['reason'][:200]}", "",
                  f"{failure['ops']} ops; found as `{failure['first_signature']}` (seed {failure['seed']})", "",
                  "```python", _forward_only(failure["source"]), "```", ""]
    return "\n".join(lines) + "\n"


def _forward_only(source: str) -> str:
    """The module, its INPUTS and make_inputs' seed: the full script is in report.json."""
    keep, lines = True, []
    for line in source.splitlines():
        if line.startswith('    """Normal floats'):
            keep = False
        if line.startswith("if __name__"):
            break
        if keep:
            lines.append(line)
    return "\n".join(lines).rstrip()
