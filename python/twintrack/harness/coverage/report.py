"""The coverage report: a JSON store of case results (which is also what a
resumed run reads back), the totals, the failures grouped by reason, and
the markdown table of op x dtype.

The JSON is rewritten atomically as results arrive, so a run that is
stopped (or dies) leaves a report of what it did, marked partial, and the
next chunk of the same run resumes it. A table holds one run: its meta
names the run (RUN_KEYS: the commit, the options), and rows of another run
are refused, except by `--retry`, which marks the table as mixed.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

from .at_commit import Refused
from .cases import DTYPES, Case

SYMBOL = {"pass": "pass", "fail": "FAIL", "unsupported": "unsup", "export": "export", "skip": "skip"}
# What makes two chunks one run: the source and every option a result depends on.
RUN_KEYS = ("commit", "dirty", "at_commit", "torch", "target", "samples", "timeout_s", "selection")


class Store:
    """Case results by id, loaded from and saved to one JSON file."""

    def __init__(self, path: Path, meta: dict | None = None):
        self.path = Path(path)
        self.meta = dict(meta or {})
        self.cases: dict[str, dict] = {}

    @classmethod
    def load(cls, path: Path) -> "Store":
        store = cls(path)
        if store.path.is_file():
            data = json.loads(store.path.read_text())
            store.meta, store.cases = data.get("meta", {}), data.get("cases", {})
        return store

    def claim(self, run: dict, retry: bool = False) -> None:
        """Make this table `run`'s (a dict holding RUN_KEYS). Rows of another
        run are refused; `retry` takes them and marks the table mixed."""
        differ = [k for k in RUN_KEYS if self.cases and self.meta.get(k) != run.get(k)]
        if not retry:
            refuse_other_run(self.meta if self.cases else run, run, RUN_KEYS, str(self.path))
        mixed = self.meta.get("mixed", False) or bool(differ)
        self.meta.update({k: run.get(k) for k in RUN_KEYS}, mixed=mixed, retried=self.meta.get("retried", False) or retry)

    def add_chunk(self, chunk: dict) -> None:
        """One invocation's share of the run: its jobs, cases and seconds."""
        self.meta.setdefault("chunks", []).append(chunk)

    def add(self, result: dict) -> None:
        self.cases[result["id"]] = result

    def save(self, complete: bool) -> None:
        self.meta.update(complete=complete, updated=time.strftime("%Y-%m-%d %H:%M:%S"))
        data = {"meta": self.meta, "totals": totals(self.cases.values()), "groups": failure_groups(self.cases.values()),
                "cases": dict(sorted(self.cases.items()))}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_suffix(".json.tmp")
        staging.write_text(scrub_paths(json.dumps(data, indent=1, default=str)) + "\n")
        os.replace(staging, self.path)


def refuse_other_run(theirs: dict, ours: dict, keys, what: str) -> None:
    """Refused unless the run that wrote `what` (its meta `theirs`) is this one (`ours`)."""
    differ = [k for k in keys if theirs.get(k) != ours.get(k)]
    if differ:
        detail = "; ".join(f"{k}: {_short(theirs.get(k))} there, {_short(ours.get(k))} here" for k in differ)
        raise Refused(f"{what} holds results of another run ({detail}): continue it with the same commit "
                      "and options, or start over (--fresh)")


def _short(value) -> str:
    text = str(value)
    return text[:12] if len(text) == 40 and all(c in "0123456789abcdef" for c in text) else text[:80]


def scrub_paths(text: str) -> str:
    """Absolute paths cut to their last two parts: a committed report names
    files, not the machine it ran on."""
    return re.sub(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+/[\w.+-]+)", r"\1", text)


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def totals(results) -> dict:
    """Counts of cases and samples by status, the pass rate over the samples
    torch.export accepts (skips aside), crashes, timeouts, and the compile
    times of the samples that finished (twintrack.compile, export included)."""
    results = list(results)
    by_case = Counter(r["status"] for r in results)
    by_sample = Counter(s["status"] for r in results for s in r.get("samples", []))
    for r in results:  # a crashed or timed-out case has no sample records: count it once
        if not r.get("samples"):
            by_sample[r["status"]] += 1
    judged = by_sample["pass"] + by_sample["fail"] + by_sample["unsupported"]
    times = [s["compile_s"] for r in results for s in r.get("samples", []) if s.get("compile_s") is not None]
    return {
        "cases": len(results),
        "case_status": dict(by_case),
        "sample_status": dict(by_sample),
        "sample_pass_rate": round(by_sample["pass"] / judged, 4) if judged else None,
        "crashes": sum(1 for r in results if r["reason"].startswith("crash")),
        "timeouts": sum(1 for r in results if r["reason"].startswith("timeout")),
        "compile_s": {"p50": percentile(times, 0.5), "p90": percentile(times, 0.9),
                      "max": max(times) if times else None, "mean": round(statistics.fmean(times), 3) if times else None},
    }


def reason_signature(reason: str) -> str:
    """A reason with its particulars (numbers, shapes, names, locations) blanked,
    so that the same bug in fifty ops is one group."""
    text = re.sub(r"loc\([^)]*\)|at [\w./<> -]+:\d+(:\d+)?", "", reason)
    text = re.sub(r"\([^()]*\d[^()]*\)", "(…)", text)
    text = re.sub(r"'([^']*)'", lambda m: m.group(0) if re.fullmatch(r"[A-Za-z_.-]{1,30}", m.group(1)) else "'…'", text)
    text = re.sub(r"\baten\.\w+", "aten.OP", text)
    text = re.sub(r"\b\d[\d.e+-]*\b", "N", text)
    text = re.sub(r"tensor<[^>]*>|memref<[^>]*>", "T", text)
    text = re.sub(r"\bvector<[^>]*>", "V", text)
    text = re.sub(r":? %N.*$", "", text)
    text = re.sub(r"that was explicitly marked\b.*$", "that was explicitly marked illegal", text)  # the IR of the op that failed: its name is in the family column
    return " ".join(text.split())[:140]


def op_family(label: str) -> str:
    """conv2d, conv_transpose3d -> conv...; max_pool2d -> max_pool; the
    variant and the nn.functional prefix dropped."""
    name = label.removeprefix("module:").removeprefix("nn.functional.").removeprefix("nn.")
    name = name.split(".")[0]
    name = re.sub(r"(_?transpose)?[123]d$", "", name)
    return name or label


def failure_groups(results, limit_ops: int = 40) -> list[dict]:
    """Failing cases grouped by reason signature, largest group first."""
    groups: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if r["status"] in ("fail", "unsupported"):
            groups[f"{r['status']}: {reason_signature(r['reason'])}"].append(r["id"])
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    return [{"reason": key, "cases": len(ids),
             "families": sorted(Counter(op_family(Case.parse(i).label) for i in ids), key=lambda f: f)[:limit_ops],
             "examples": ids[:limit_ops]} for key, ids in ordered]


def family_table(results) -> list[tuple[str, int, int]]:
    """(family, failing cases, cases) for the families with failures, worst first."""
    failing, every = Counter(), Counter()
    for r in results:
        family = op_family(Case.parse(r["id"]).label)
        every[family] += 1
        failing[family] += r["status"] == "fail"
    return sorted(((f, failing[f], every[f]) for f in failing if failing[f]), key=lambda t: (-t[1], t[0]))


def markdown(store: Store, title: str, dtypes=DTYPES) -> str:
    """The report as markdown: header, totals, groups, the op x dtype table, the reasons."""
    results = list(store.cases.values())
    t = totals(results)
    lines = [f"# {title}", "", _header_note(store.meta, len(results)), "", "## Totals", ""]
    lines += [f"- cases: {t['cases']} ({_counts(t['case_status'])})",
              f"- samples: {_counts(t['sample_status'])}",
              f"- **sample pass rate** (over samples torch.export accepts, skips aside): "
              f"{_percent(t['sample_pass_rate'])}",
              f"- crashes: {t['crashes']}, timeouts: {t['timeouts']}",
              f"- compile time per sample (s; twintrack.compile, export included; timeouts not counted): "
              f"p50 {t['compile_s']['p50']}, p90 {t['compile_s']['p90']}, max {t['compile_s']['max']}",
              f"- run time: {_run_time(store.meta)}", ""]
    lines += _slowest_section(results) + _groups_section(results) + _families_section(results)
    lines += _table_section(results, dtypes)
    lines += _reasons_section(results)
    return scrub_paths("\n".join(lines) + "\n")


def _header_note(meta: dict, cases: int) -> str:
    state = "complete" if meta.get("complete") else f"**PARTIAL** ({cases} of {meta.get('selected', '?')} selected cases)"
    source = f"commit {_short(meta.get('commit'))}" + (" with uncommitted changes" if meta.get("dirty") else "")
    source += " (from a worktree of it)" if meta.get("at_commit") else " (from a live checkout)"
    mixed = (" **Rows of several runs** (`--retry`): not one run's figures." if meta.get("mixed")
             else " Some rows re-run by `--retry`." if meta.get("retried") else " Every row from this one run.")
    shown = {**{k: meta.get(k) for k in RUN_KEYS if k not in ("commit", "dirty", "at_commit")},
             "selection": meta.get("selection") or "all"}
    options = ", ".join(f"{k}={v}" for k, v in shown.items())
    return (f"Run {state} at {source}; updated {meta.get('updated', '?')}. Options: {options}.{mixed} "
            "Statuses: pass, FAIL (mismatch / compile error / run error / crash / timeout), "
            "unsup (a twintrack error saying it is unsupported), export (torch.export rejects it, "
            "strict and non-strict: not counted), skip (eager fails, or no samples).")


def _run_time(meta: dict) -> str:
    chunks = meta.get("chunks", [])
    seconds = sum(c["seconds"] for c in chunks)
    jobs = sorted({c["jobs"] for c in chunks})
    return f"{seconds / 60:.1f} min in {len(chunks)} chunk(s) at --jobs {'/'.join(map(str, jobs)) or '?'}"


def _slowest_section(results, count: int = 10) -> list[str]:
    timed = [(s["compile_s"], r["id"]) for r in results for s in r.get("samples", []) if s.get("compile_s")]
    lines = ["## Slowest compiles", "", "| seconds | case |", "|---|---|"]
    lines += [f"| {seconds:.2f} | {case} |" for seconds, case in sorted(timed, reverse=True)[:count]]
    return lines + [""]


def _counts(counter: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1]))


def _percent(rate) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _groups_section(results) -> list[str]:
    lines = ["## Top failure reasons", "", "| cases | reason (particulars blanked) | families | examples |", "|---|---|---|---|"]
    for group in failure_groups(results)[:30]:
        lines.append(f"| {group['cases']} | {_cell(group['reason'])} | {', '.join(group['families'][:16])} | "
                     f"{', '.join(group['examples'][:4])} |")
    return lines + [""]


def _families_section(results) -> list[str]:
    lines = ["## Failing op families", "", "| family | failing cases | cases |", "|---|---|---|"]
    lines += [f"| {f} | {n} | {total} |" for f, n, total in family_table(results)[:40]]
    return lines + [""]


def _table_section(results, dtypes) -> list[str]:
    rows: dict[str, dict[str, str]] = defaultdict(dict)
    for r in results:
        case = Case.parse(r["id"])
        rows[case.label][case.dtype] = SYMBOL.get(r["status"], r["status"])
    lines = ["## Op x dtype", "", "| op | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for label in sorted(rows):
        lines.append(f"| {label} | " + " | ".join(rows[label].get(d, "") for d in dtypes) + " |")
    return lines + [""]


def _reasons_section(results) -> list[str]:
    lines = ["## Reasons (every case that is not pass)", "", "| case | status | reason |", "|---|---|---|"]
    for r in sorted(results, key=lambda r: r["id"]):
        if r["status"] != "pass":
            lines.append(f"| {r['id']} | {r['status']} | {_cell(r['reason'])} |")
    return lines + [""]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
