"""The comparison as text: totals of the three tracks, then the kernels of
both tracks side by side, group by group."""

from __future__ import annotations

from ..timing import NOISY_FOOTNOTE, NOISY_MARK

TRACK_ORDER = ("eager", "inductor", "twintrack")
_SIDE = "{name:<30} {ops:<24} {kib:>9} {mflop:>9} {regs:>9} {ms:>8} {roof:>5}"
_DASH = "—"


def render_table(report: dict) -> str:
    return "\n".join(_totals(report) + [""] + _kernels(report) + [""] + [f"note: {n}" for n in report["notes"]]) + "\n"


def render_training_table(report: dict) -> str:
    """compare --training's report: the tracks' step times and numerics, then the kernels."""
    return "\n".join(_training_totals(report) + [""] + _kernels(report) + [""]
                     + [f"note: {n}" for n in report["notes"]]) + "\n"


def _training_totals(report: dict) -> list[str]:
    tracks = report["tracks"]
    lines = [f"{report['model']} training on {report['device_name']} ({report['dtype']}), torch {report['torch']}, "
             f"{report['date']}: {report['description']}",
             f"{'':<20}" + "".join(f"{t:>14}" for t in TRACK_ORDER)]

    def row(label: str, cell) -> None:
        lines.append(f"{label:<20}" + "".join(f"{cell(tracks[t]):>14}" for t in TRACK_ORDER))

    row("first step s", lambda t: f"{t['first_step_s']:.2f}")
    row("step ms", lambda t: _DASH if t.get("step_s") is None else f"{1e3 * t['step_s']:.2f}")
    row("loss vs float64", lambda t: f"{t['vs_float64']['loss']:.1e}")
    row("state vs float64", lambda t: f"{t['vs_float64']['state']:.1e}")
    row("loss vs eager", lambda t: f"{t['vs_eager']['loss']:.1e}" if "vs_eager" in t else _DASH)
    row("state vs eager", lambda t: f"{t['vs_eager']['state']:.1e}" if "vs_eager" in t else _DASH)
    row("graphs", lambda t: str(t["graphs"]) if "graphs" in t else _DASH)
    row("kernels fwd/bwd", lambda t: "{forward}/{backward}".format(**t["kernel_count"]) if "kernel_count" in t
        else _DASH)
    row("passes", lambda t: _DASH if "ok" not in t else ("yes" if t["ok"] else "NO"))
    twintrack, inductor = tracks["twintrack"].get("step_s"), tracks["inductor"].get("step_s")
    if twintrack and inductor:
        lines.append(f"twintrack/inductor step time: {twintrack / inductor:.2f}   twintrack/eager: "
                     f"{twintrack / tracks['eager']['step_s']:.2f}")
    return lines


def _totals(report: dict) -> list[str]:
    tracks = report["tracks"]
    lines = [f"{report['model']} on {report['device_name']} ({report['dtype']}), torch {report['torch']}, {report['date']}",
             f"{'':<16}" + "".join(f"{t:>14}" for t in TRACK_ORDER)]
    lines.append(f"{'latency ms':<16}" + "".join(f"{latency_cell(tracks[t]):>14}" for t in TRACK_ORDER))
    lines.append(f"{'  p10-p90 ms':<16}" + "".join(f"{spread_cell(tracks[t]):>14}" for t in TRACK_ORDER))
    for label, key, fmt in (("compile s", "compile_seconds", "{:.1f}"),
                            ("kernels", "kernel_count", "{}"), ("rel. error", "rel_error", "{:.1e}")):
        lines.append(f"{label:<16}" + "".join(f"{_cell(tracks[t], key, fmt):>14}" for t in TRACK_ORDER))
    for name in TRACK_ORDER:
        if tracks[name].get("error"):
            lines.append(f"{name} failed: {tracks[name]['error']}")
    if tracks["twintrack"].get("graph_latency_ms"):
        graph = latency_cell(tracks["twintrack"], "graph_latency")
        lines.append(f"{'  as CUDA graph':<16}{'':>28}{graph:>14}  (p10-p90 "
                     f"{spread_cell(tracks['twintrack'], 'graph_latency')})")
    timing = report.get("timing")
    if timing:
        lines.append(f"timing: {timing['method']}; {timing['threads']} thread(s)")
        if timing.get("noisy"):
            lines.append(timing.get("footnote", NOISY_FOOTNOTE))
    ratio = latency_ratio(tracks)
    if ratio is not None:
        lines.append(f"twintrack/inductor latency: {ratio:.2f}   twintrack/eager: "
                     f"{tracks['twintrack']['latency_ms'] / tracks['eager']['latency_ms']:.2f}")
    return lines


def latency_ratio(tracks: dict) -> float | None:
    twintrack, inductor = tracks["twintrack"].get("latency_ms"), tracks["inductor"].get("latency_ms")
    return twintrack / inductor if twintrack and inductor else None


def latency_cell(track: dict, prefix: str = "latency") -> str:
    """'0.4123', or '0.4123~' where the measurement's spread flags it noisy."""
    value = track.get(f"{prefix}_ms")
    if value is None or track.get("error"):
        return _DASH
    return f"{value:.4f}{NOISY_MARK if track.get(f'{prefix}_noisy') else ''}"


def spread_cell(track: dict, prefix: str = "latency") -> str:
    """'0.401-0.433': the measurement's p10 to p90."""
    low, high = track.get(f"{prefix}_p10_ms"), track.get(f"{prefix}_p90_ms")
    if low is None or high is None or track.get("error"):
        return _DASH
    return f"{low:.4g}-{high:.4g}"


def _cell(track: dict, key: str, fmt: str) -> str:
    value = track.get(key)
    return _DASH if value is None or track.get("error") else fmt.format(value)


def _kernels(report: dict) -> list[str]:
    header = _SIDE.format(name="twintrack kernel", ops="torch ops", kib="KiB", mflop="MFLOP", regs="regs/smem",
                          ms="ms", roof="%roof")
    lines = [f"{'grp':>3} {header} | {header.replace('twintrack', 'inductor ')}"]
    by_index = {track: {k["index"]: k for k in report["kernels"][track]} for track in ("twintrack", "inductor")}
    for number, group in enumerate(report["groups"]):
        left = [by_index["twintrack"][i] for i in group["twintrack"]]
        right = [by_index["inductor"][i] for i in group["inductor"]]
        for row in range(max(len(left), len(right))):
            label = str(number) if row == 0 else ""
            lines.append(f"{label:>3} {_side(left, row)} | {_side(right, row)}")
    return lines


def _side(kernels: list[dict], row: int) -> str:
    if row >= len(kernels):
        return _SIDE.format(name="", ops="", kib="", mflop="", regs="", ms="", roof="")
    k = kernels[row]
    regs = _DASH if k.get("registers") is None else f"{k['registers']}/{(k.get('shared_bytes') or 0) // 1024}K"
    return _SIDE.format(
        name=clip(k["name"], 30), ops=clip(_op_names(k["source_ops"]), 24),
        kib=_DASH if k.get("bytes") is None else f"{k['bytes'] / 1024:.1f}",
        mflop=_DASH if k.get("flops") is None else f"{k['flops'] / 1e6:.2f}", regs=regs,
        ms=_DASH if k.get("ms") is None else f"{k['ms']:.4f}",
        roof=_DASH if k.get("roofline_fraction") is None else f"{100 * k['roofline_fraction']:.0f}")


def _op_names(source_ops: list[str]) -> str:
    """'aten.addmm at linear.py:134', ... -> 'addmm,gelu'."""
    names = dict.fromkeys(s.split(" at ")[0].removeprefix("aten.") for s in source_ops)
    return ",".join(names) or _DASH


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[:width - 1] + "…"
