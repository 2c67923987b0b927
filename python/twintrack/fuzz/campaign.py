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
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from twintrack.coverage.report import reason_signature

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

        @settings(max_examples=max(1, self.examples - self.explored), database=None, deadline=None,
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
        else:
            self.explored += 1
        result = self.checker(source)
        self.cache[source] = result
        if not state["shrinking"]:
            self.statuses[result["status"]] += 1
            if failure_kind(result):
                self.seen[signature(result)] += 1
            if self.on_example:
                self.on_example({**result, "n": self.explored})
        return result

    def report(self, target: str, complete: bool = True, seconds: float | None = None) -> dict:
        return {"meta": {"examples": self.explored, "budget": self.examples, "seed": self.seed, "target": target,
                         "ops": [self.min_ops, self.max_ops], "shrink_budget": self.shrink_budget,
                         "complete": complete, "seconds": seconds, "updated": time.strftime("%Y-%m-%d %H:%M:%S")},
                "statuses": dict(self.statuses),
                "signatures": dict(self.seen.most_common()),
                "failures": self.failures}


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


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    """out_dir/report.json and report.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    md_path.write_text(markdown(report))
    return json_path, md_path


def markdown(report: dict) -> str:
    meta = report["meta"]
    state = "complete" if meta["complete"] else "**PARTIAL**"
    lines = [f"# Differential fuzzing: twintrack vs eager ({meta['target']})", "",
             f"{state}: {meta['examples']} examples (budget {meta['budget']}), seed {meta['seed']}, "
             f"{meta['ops'][0]}-{meta['ops'][1]} ops per graph, {meta['seconds'] or 0:.0f} s; updated {meta['updated']}.",
             "", "Statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(report["statuses"].items())), "",
             "## Failure signatures (examples failing with each)", "", "| examples | signature |", "|---|---|"]
    lines += [f"| {n} | {s.replace('|', '/')} |" for s, n in report["signatures"].items()]
    lines += ["", "## Minimal failing graphs (shrunk)", ""]
    for index, failure in enumerate(report["failures"], 1):
        lines += [f"### {index}. {failure['kind']}: {failure['reason'][:200]}", "",
                  f"{failure['ops']} ops; found as `{failure['first_signature']}`", "", "```python",
                  _forward_only(failure["source"]), "```", ""]
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
