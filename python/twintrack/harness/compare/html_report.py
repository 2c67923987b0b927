"""One self-contained HTML page comparing twintrack's and Inductor's kernels for a model.

    html_text = render_html(report)     # report: the dict the compare driver writes

The page needs no network: CSS is inline and every plot is an inline SVG drawn here,
so it can be opened from a file, mailed, or attached to CI artifacts. Every section
has a stable id (summary, kernel-times, roofline, fusion-graph, kernels).
"""

from __future__ import annotations

import math
from html import escape

from ..timing import NOISY_FOOTNOTE, NOISY_MARK
from .table import clip

TRACKS = ("twintrack", "inductor")
TRACK_COLOR = {"twintrack": "#1f77b4", "inductor": "#d62728"}
# Tableau-like palette; cycled by kernel index, so neighbouring kernels differ.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
           "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d4a6c8")
NO_KERNEL = "#dddddd"
DASH = "—"
SVG_NS = "http://www.w3.org/2000/svg"

CSS = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:24px 0 6px;border-bottom:1px solid #ccc}
table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f3f3f3;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
.err{color:#b00} .caption{color:#555;font-size:12px;margin:4px 0}
.row{display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start}
.half{flex:1 1 0;min-width:0}
.scroll{overflow:auto;max-height:900px;border:1px solid #ddd}
.kernel{margin:0 0 8px} .kernel b{font-family:monospace} .metrics{color:#444;font-size:12px}
details{margin:1px 0} summary{cursor:pointer;color:#1a5fb4;font-family:monospace;font-size:12px}
pre{max-height:480px;overflow:auto;background:#f7f7f7;padding:6px;font-size:11px;margin:2px 0}
svg text{font-family:system-ui,sans-serif}
"""


# ---------------------------------------------------------------- formatting

def _fmt(value, spec: str, suffix: str = "") -> str:
    """Any report number may be null: show an em dash instead."""
    return DASH if value is None else f"{value:{spec}}{suffix}"


def _fmt_bytes(n) -> str:
    if n is None:
        return DASH
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _fmt_si(n) -> str:
    if n is None:
        return DASH
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:g}"


def _dims(d) -> str:
    return DASH if d is None else "×".join(str(x) for x in d)


def _short_op(label: str) -> str:
    """'aten.native_layer_norm at normalization.py:228' -> 'native_layer_norm'."""
    return label.split(" at ")[0].removeprefix("aten.").removesuffix(".default")


def _gb_s(k: dict):
    return None if not k.get("ms") or k.get("bytes") is None else k["bytes"] / k["ms"] * 1e-6


def _gflop_s(k: dict):
    return None if not k.get("ms") or k.get("flops") is None else k["flops"] / k["ms"] * 1e-6


def _kernel_tooltip(track: str, k: dict) -> str:
    return (f"{track} #{k['index']} {k['name']}\n{_fmt(k.get('ms'), '.4g', ' ms')}, "
            f"{_fmt(_gb_s(k), '.4g', ' GB/s')}, {_fmt(_gflop_s(k), '.4g', ' GFLOP/s')}")


def _svg(width: float, height: float, body: list[str], **attrs) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items())
    return (f'<svg xmlns="{SVG_NS}" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}"{extra}>' + "".join(body) + "</svg>")


def _text(x, y, s: str, anchor="start", size=11, **attrs) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items())
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{extra}>'
            f'{escape(s)}</text>')


# ---------------------------------------------------------------- sections

def _summary(report: dict) -> str:
    tracks = report["tracks"]
    rows = []
    for name in ("eager", "inductor", "twintrack"):
        t = tracks.get(name) or {"error": "missing from report"}
        if t.get("error"):
            cells = f'<td colspan="5" class="err">{escape(t["error"])}</td>'
        else:
            cells = "".join(f'<td class="num">{v}</td>' for v in (
                _latency(t), _spread(t), _fmt(t.get("compile_seconds"), ".1f"),
                _fmt(t.get("kernel_count"), "d"), _fmt(t.get("rel_error"), ".1e")))
        rows.append(f"<tr><th>{escape(name)}</th>{cells}</tr>")
    tt, ind = tracks.get("twintrack") or {}, tracks.get("inductor") or {}
    ratio = (tt["latency_ms"] / ind["latency_ms"]
             if not tt.get("error") and not ind.get("error")
             and tt.get("latency_ms") and ind.get("latency_ms") else None)
    c = report.get("ceilings") or {}
    meta = [("model", report.get("model")), ("device", f"{report.get('device')} ({report.get('device_name')})"),
            ("date", report.get("date")), ("torch", report.get("torch")),
            ("ceilings", f"{_fmt(c.get('bandwidth_gb_s'), 'g', ' GB/s')}, {_fmt(c.get('tflops'), 'g', ' TFLOP/s')}"
                         f" ({c.get('source') or 'no source given'})")]
    notes = "".join(f"<li>{escape(n)}</li>" for n in report.get("notes") or [])
    return (
        '<section id="summary"><h1>twintrack vs Inductor: ' + escape(str(report.get("model"))) + "</h1>"
        + "<table>" + "".join(f"<tr><th>{k}</th><td>{escape(str(v))}</td></tr>" for k, v in meta) + "</table>"
        + "<h2>Totals</h2><table><tr><th>track</th><th>latency ms</th><th>p10–p90 ms</th><th>compile s</th>"
        + "<th>kernels</th><th>rel. error vs float64</th></tr>" + "".join(rows) + "</table>"
        + _timing_note(report.get("timing"))
        + f'<p>twintrack / inductor latency: <b id="latency-ratio">{_fmt(ratio, ".2f", "×")}</b></p>'
        + (f"<ul class='caption'>{notes}</ul>" if notes else "") + "</section>")


def _latency(track: dict) -> str:
    """The median, marked (with its spread in a tooltip) where the measurement is noisy."""
    text = escape(_fmt(track.get("latency_ms"), ".4g"))
    if not track.get("latency_noisy"):
        return text
    return f'{text}<sup class="noisy" title="spread over the threshold: see the note below">{NOISY_MARK}</sup>'


def _spread(track: dict) -> str:
    low, high = track.get("latency_p10_ms"), track.get("latency_p90_ms")
    return DASH if low is None or high is None else f"{low:.4g}–{high:.4g}"


def _timing_note(timing: dict | None) -> str:
    """How the latencies were measured (threads included), and the noisy marker's footnote."""
    if not timing:
        return ""
    footnote = f" {escape(timing.get('footnote', NOISY_FOOTNOTE))}." if timing.get("noisy") else ""
    return (f'<p class="caption" id="timing-note">Latency: {escape(timing["method"])}; '
            f'{escape(str(timing["threads"]))} thread(s).{footnote}</p>')


def _time_bars(track: str, kernels: list[dict], max_ms: float) -> str:
    """Horizontal bars in launch order; one scale for both tracks so lengths compare."""
    label_w, bar_w, row_h = 230, 260, 16
    body = []
    for i, k in enumerate(kernels):
        y = 20 + i * row_h
        body.append(_text(label_w - 4, y + 11, clip(f"{k['index']} {k['name']}", 36), "end", 10))
        if k.get("ms") is None:
            body.append(_text(label_w + 2, y + 11, "no time", size=10, fill="#999"))
            continue
        w = max(1.0, bar_w * k["ms"] / max_ms)
        body.append(f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 4}" '
                    f'fill="{TRACK_COLOR[track]}"><title>{escape(_kernel_tooltip(track, k))}</title></rect>')
        body.append(_text(label_w + w + 3, y + 11, f"{k['ms']:.4g}", size=10))
    body.insert(0, _text(4, 13, f"{track} ({len(kernels)} kernels), ms", size=12, font_weight="bold"))
    return _svg(label_w + bar_w + 60, 26 + len(kernels) * row_h, body, data_track=track)


def _kernel_times(report: dict) -> str:
    kernels = report["kernels"]
    timed = [k["ms"] for t in TRACKS for k in kernels.get(t, []) if k.get("ms") is not None]
    untimed = sum(k.get("ms") is None for t in TRACKS for k in kernels.get(t, []))
    charts = "".join(_time_bars(t, kernels.get(t, []), max(timed, default=1.0) or 1.0) for t in TRACKS)
    note = (f"{untimed} kernel(s) have no per-kernel time (not measured on this device) and get no bar."
            if untimed else "All kernels timed.")
    return (f'<section id="kernel-times"><h2>Per-kernel time (launch order)</h2>'
            f'<p class="caption">{escape(note)} Bars share one scale.</p>'
            f'<div class="row">{charts}</div></section>')


class _LogAxis:
    """Maps a positive value onto [start, start + length] on a log10 scale of whole decades."""

    def __init__(self, lo: float, hi: float, start: float, length: float, flip: bool = False):
        self.lo, self.hi = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        self.hi = max(self.hi, self.lo + 1)
        self.start, self.length, self.flip = start, length, flip

    def __call__(self, v: float) -> float:
        f = (math.log10(v) - self.lo) / (self.hi - self.lo)
        return self.start + self.length * (1 - f if self.flip else f)

    def decades(self) -> range:
        return range(self.lo, self.hi + 1)


def _roofline_points(report: dict):
    """(track, kernel, intensity, GFLOP/s) for kernels with a time, flops and bytes; the rest counted."""
    points, skipped = [], {"no time": 0, "zero flops": 0}
    for track in TRACKS:
        for k in report["kernels"].get(track, []):
            if not k.get("ms"):
                skipped["no time"] += 1
            elif not k.get("flops") or not k.get("bytes"):
                skipped["zero flops"] += 1  # pure data movement has no place on a log flop axis
            else:
                points.append((track, k, k["flops"] / k["bytes"], _gflop_s(k)))
    return points, skipped


def _roofline(report: dict) -> str:
    c = report.get("ceilings") or {}
    bw, peak = c.get("bandwidth_gb_s"), (c.get("tflops") or 0) * 1e3 or None   # GFLOP/s
    points, skipped = _roofline_points(report)
    xs = [p[2] for p in points] + ([peak / bw] if bw and peak else []) or [1e-2, 1e3]
    ys = [p[3] for p in points] + ([peak] if peak else []) or [1.0, 1e3]
    x = _LogAxis(min(xs) / 3, max(xs) * 3, 70, 560)
    ys += [bw * 10 ** x.lo] if bw else []          # the bandwidth line starts on-chart
    y = _LogAxis(min(ys), max(ys) * 1.5, 20, 380, flip=True)
    body = ['<rect x="70" y="20" width="560" height="380" fill="none" stroke="#999"/>']
    for d in x.decades():
        body += [f'<line x1="{x(10**d):.1f}" y1="20" x2="{x(10**d):.1f}" y2="400" stroke="#eee"/>',
                 _text(x(10**d), 415, f"1e{d}", "middle", 10)]
    for d in y.decades():
        body += [f'<line x1="70" y1="{y(10**d):.1f}" x2="630" y2="{y(10**d):.1f}" stroke="#eee"/>',
                 _text(66, y(10**d) + 3, f"1e{d}", "end", 10)]
    body += [_text(350, 432, "arithmetic intensity (flop/byte)", "middle"),
             _text(14, 210, "achieved GFLOP/s", "middle", transform="rotate(-90 14 210)")]
    x_end = 10 ** x.hi
    if bw:
        x_knee = min(peak / bw, x_end) if peak else x_end
        body.append(f'<line class="ceiling bandwidth" x1="70" y1="{y(bw * 10 ** x.lo):.1f}" x2="{x(x_knee):.1f}" '
                    f'y2="{y(bw * x_knee):.1f}" stroke="#555" stroke-width="1.5">'
                    f'<title>bandwidth ceiling {bw:g} GB/s</title></line>')
        # label along the sloped line, at its middle
        (x1, y1), (x2, y2) = (70, y(bw * 10 ** x.lo)), (x(x_knee), y(bw * x_knee))
        mx, my, angle = (x1 + x2) / 2, (y1 + y2) / 2, math.degrees(math.atan2(y2 - y1, x2 - x1))
        body.append(_text(mx, my - 5, f"{bw:g} GB/s", "middle", 10, fill="#555",
                          transform=f"rotate({angle:.1f} {mx:.1f} {my:.1f})"))
    if peak:
        x_knee = peak / bw if bw else 10 ** x.lo
        body.append(f'<line class="ceiling compute" x1="{x(x_knee):.1f}" y1="{y(peak):.1f}" x2="630" '
                    f'y2="{y(peak):.1f}" stroke="#555" stroke-width="1.5"><title>compute ceiling '
                    f'{peak / 1e3:g} TFLOP/s</title></line>')
        body.append(_text(626, y(peak) - 5, f"{peak / 1e3:g} TFLOP/s", "end", 10, fill="#555"))
    for track, k, ai, gf in points:
        px, py, tip = x(ai), y(gf), f"<title>{escape(_kernel_tooltip(track, k))}\n{ai:.3g} flop/byte</title>"
        col = TRACK_COLOR[track]
        body.append(f'<circle class="marker" data-track="twintrack" cx="{px:.1f}" cy="{py:.1f}" r="4" '
                    f'fill="{col}" fill-opacity="0.7">{tip}</circle>' if track == "twintrack" else
                    f'<rect class="marker" data-track="inductor" x="{px - 4:.1f}" y="{py - 4:.1f}" width="8" '
                    f'height="8" fill="{col}" fill-opacity="0.7">{tip}</rect>')
    body += [f'<circle cx="90" cy="34" r="4" fill="{TRACK_COLOR["twintrack"]}"/>', _text(98, 38, "twintrack"),
             f'<rect x="86" y="46" width="8" height="8" fill="{TRACK_COLOR["inductor"]}"/>',
             _text(98, 54, "inductor")]
    caption = (f"Plotted: {len(points)} kernels. Not plotted: {skipped['no time']} without a measured time, "
               f"{skipped['zero flops']} with zero flops or bytes (pure data movement has no place on a log "
               f"flop axis). Ceilings: {_fmt(bw, 'g', ' GB/s')}, {_fmt(c.get('tflops'), 'g', ' TFLOP/s')}.")
    return (f'<section id="roofline"><h2>Roofline</h2><p class="caption">{escape(caption)}</p>'
            f'{_svg(650, 440, body)}</section>')


def _layers(nodes: list[dict], edges: list) -> dict[int, int]:
    """Longest-path layering (Kahn order); nodes on a cycle, if any, fall back to layer 0.
    Inputs (weights, transposes of them) then move down to just above their first consumer:
    left in layer 0 they would make one very wide row with edges running the whole height."""
    ids = [n["id"] for n in nodes]
    succ, indeg = {i: [] for i in ids}, dict.fromkeys(ids, 0)
    for a, b in edges:
        if a in succ and b in succ:
            succ[a].append(b)
            indeg[b] += 1
    layer, ready = dict.fromkeys(ids, 0), [i for i in ids if indeg[i] == 0]
    while ready:
        a = ready.pop()
        for b in succ[a]:
            layer[b] = max(layer[b], layer[a] + 1)
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    has_pred = {b for a, b in edges}
    for i in ids:
        if i not in has_pred and succ[i]:
            layer[i] = min(layer[b] for b in succ[i]) - 1
    return layer


def _layout(graph: dict, node_w: float, node_h: float, gap_x: float, gap_y: float) -> dict[int, tuple]:
    """Node id -> (x, y): rows by layer; within a row, sorted by the mean x of predecessors
    (one barycenter sweep) so edges cross less than in id order."""
    layer = _layers(graph["nodes"], graph["edges"])
    preds: dict[int, list] = {}
    for a, b in graph["edges"]:
        preds.setdefault(b, []).append(a)
    rows: dict[int, list] = {}
    for n in graph["nodes"]:
        rows.setdefault(layer[n["id"]], []).append(n["id"])
    pos: dict[int, tuple] = {}
    for li in sorted(rows):
        order = sorted(rows[li], key=lambda i: (sum(pos[p][0] for p in preds.get(i, []) if p in pos)
                                                / max(1, sum(p in pos for p in preds.get(i, [])))))
        for j, i in enumerate(order):
            pos[i] = (10 + j * (node_w + gap_x), 10 + li * (node_h + gap_y))
    return pos


def _fusion_svg(report: dict, track: str, pos: dict, node_w: float, node_h: float) -> str:
    graph, names = report["graph"], {k["index"]: k["name"] for k in report["kernels"].get(track, [])}
    body = []
    for a, b in graph["edges"]:
        if a in pos and b in pos:
            (x1, y1), (x2, y2) = pos[a], pos[b]
            x1, y1, x2 = x1 + node_w / 2, y1 + node_h, x2 + node_w / 2
            body.append(f'<path d="M{x1:.0f},{y1:.0f} C{x1:.0f},{y2 - 6:.0f} {x2:.0f},{y1 + 6:.0f} '
                        f'{x2:.0f},{y2:.0f}" fill="none" stroke="#aaa" stroke-width="0.8"/>')
    for n in graph["nodes"]:
        ks = n.get(track) or []
        fill = PALETTE[ks[0] % len(PALETTE)] if ks else NO_KERNEL
        # a node in several kernels is recomputed: dashed dark border, first kernel's colour
        stroke = ' stroke="#000" stroke-width="1.6" stroke-dasharray="3,2"' if len(ks) > 1 else ' stroke="#666"'
        kinfo = ", ".join(f"#{k} {names.get(k, '?')}" for k in ks) or "no kernel"
        tip = f"{n['label']} ({n.get('source') or 'no source'})\n{track}: {kinfo}"
        x0, y0 = pos[n["id"]]
        body.append(f'<g class="node" data-id="{n["id"]}"><title>{escape(tip)}</title>'
                    f'<rect x="{x0:.0f}" y="{y0:.0f}" width="{node_w}" height="{node_h}" rx="3" fill="{fill}"{stroke}/>'
                    + _text(x0 + node_w / 2, y0 + node_h - 5, clip(_short_op(n["label"]), 19), "middle", 9)
                    + "</g>")
    width = max((x for x, _ in pos.values()), default=0) + node_w + 20
    height = max((y for _, y in pos.values()), default=0) + node_h + 20
    return (f'<div class="half"><b>{escape(track)}</b> kernel grouping'
            f'<div class="scroll">{_svg(width, height, body, data_track=track)}</div></div>')


def _fusion_graph(report: dict) -> str:
    node_w, node_h = 104, 18
    pos = _layout(report["graph"], node_w, node_h, gap_x=8, gap_y=22)
    svgs = "".join(_fusion_svg(report, t, pos, node_w, node_h) for t in TRACKS)
    caption = ("Op graph, one layer per row (longest path from the inputs). Nodes of one kernel share a "
               "colour (palette cycled by kernel index, so distant kernels may repeat a colour; hover for "
               "the kernel); a dashed black border marks an op computed in several kernels (first kernel's "
               "colour); grey ops belong to no kernel.")
    return (f'<section id="fusion-graph"><h2>Fusion: ops grouped into kernels</h2>'
            f'<p class="caption">{escape(caption)}</p><div class="row">{svgs}</div></section>')


def _kernel_cell(track: str, k: dict) -> str:
    ops = list(dict.fromkeys(_short_op(o) for o in k.get("source_ops") or []))
    ops_text = ", ".join(ops[:6]) + (f" +{len(ops) - 6} more" if len(ops) > 6 else "")
    hw = [f"{k[f]} {label}" for f, label in (("registers", "regs"), ("spills", "spills")) if k.get(f) is not None]
    hw += [f"{_fmt_bytes(k['shared_bytes'])} smem"] if k.get("shared_bytes") is not None else []
    hw += [f"grid {_dims(k['grid'])} block {_dims(k.get('block'))}"] if k.get("grid") is not None else []
    frac = k.get("roofline_fraction")
    metrics = [f"{_fmt_bytes(k.get('bytes'))}", f"{_fmt_si(k.get('flops'))} flop",
               _fmt(k.get("ms"), ".4g", " ms"), f"{_fmt(None if frac is None else frac * 100, '.0f', '%')} of roofline"]
    sources = "".join(
        f'<details class="source" data-kernel="{track}:{k["index"]}" data-source="{escape(kind)}">'
        f"<summary>{escape(kind)} ({_fmt_bytes(len(text))})</summary><pre>{escape(text)}</pre></details>"
        for kind, text in (k.get("sources") or {}).items())
    title = escape("\n".join(k.get("source_ops") or []))
    return (f'<div class="kernel" id="{track}-{k["index"]}"><b>#{k["index"]} {escape(k["name"])}</b> '
            f'<span class="metrics">[{escape(k.get("kind") or "?")}]</span>'
            f'<div class="metrics" title="{title}">ops: {escape(ops_text or DASH)}</div>'
            f'<div class="metrics">{escape(" · ".join(metrics + hw))}</div>{sources}</div>')


def _kernels_table(report: dict) -> str:
    by_index = {t: {k["index"]: k for k in report["kernels"].get(t, [])} for t in TRACKS}
    groups = list(report.get("groups") or [])
    # kernels no group mentions still get a row: hiding them would hide work
    seen = {t: {i for g in groups for i in g.get(t, [])} for t in TRACKS}
    leftover = {t: [i for i in by_index[t] if i not in seen[t]] for t in TRACKS}
    rows = [(str(n), g) for n, g in enumerate(groups)]
    rows += [("ungrouped", leftover)] if any(leftover.values()) else []
    body = "".join(
        f"<tr><td>{label}</td>" + "".join(
            "<td>" + ("".join(_kernel_cell(t, by_index[t][i]) for i in g.get(t, []) if i in by_index[t])
                      or f'<span class="caption">{DASH}</span>') + "</td>" for t in TRACKS) + "</tr>"
        for label, g in rows)
    return ('<section id="kernels"><h2>Kernels side by side</h2><p class="caption">One row per group of '
            "kernels that cover the same ops; click a source kind to open it.</p>"
            "<table><tr><th>group</th><th>twintrack</th><th>inductor</th></tr>" + body + "</table></section>")


def render_html(report: dict) -> str:
    """The whole comparison page for one report dict, as a standalone HTML document."""
    title = escape(f"twintrack vs inductor: {report.get('model')} on {report.get('device')}")
    sections = (_summary(report), _kernel_times(report), _roofline(report),
                _fusion_graph(report), _kernels_table(report))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{CSS}</style></head><body>" + "\n".join(sections) + "</body></html>\n")
