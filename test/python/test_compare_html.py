"""The comparison page renders in a real headless Chromium: every section, bar, marker,
graph node and source <details> is in the DOM, and nothing is fetched from the network."""

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from twintrack.harness.compare.html_report import render_html

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# A transformer block: layer norm, q/k/v projections, attention, output projection, MLP.
OPS = ["aten.native_layer_norm", "aten.t", "aten.addmm", "aten.t", "aten.addmm", "aten.t", "aten.addmm",
       "aten.view", "aten.view", "aten.view", "aten.transpose", "aten.bmm", "aten.div", "aten._softmax",
       "aten.bmm", "aten.view", "aten.t", "aten.addmm", "aten.add", "aten.native_layer_norm", "aten.t",
       "aten.addmm", "aten.gelu", "aten.t", "aten.addmm", "aten.add"]
EDGES = [[0, 2], [1, 2], [0, 4], [3, 4], [0, 6], [5, 6], [2, 7], [4, 8], [6, 9], [8, 10], [7, 11], [10, 11],
         [11, 12], [12, 13], [13, 14], [9, 14], [14, 15], [15, 17], [16, 17], [17, 18], [18, 19], [19, 21],
         [20, 21], [21, 22], [22, 24], [23, 24], [24, 25], [18, 25]]
# Node -> kernel indices per track; node 0 (layer norm) is recomputed in twintrack kernels 0 and 1.
TT_OF = [[0, 1], [], [1], [], [2], [], [3], [], [], [], [], [4], [5], [5], [6], [], [], [7], [8], [8], [],
         [9], [9], [], [10], [10]]
IND_OF = [[0], [], [1], [], [1], [], [1], [], [], [], [], [2], [3], [3], [4], [], [], [5], [6], [6], [], [7],
          [8], [], [9], [9]]
TT_MS = [0.0021, 0.0032, 0.0030, 0.0031, None, 0.0012, 0.0040, 0.0029, 0.0025, 0.0051, 0.0047]
IND_MS = [0.0018, 0.0065, None, 0.0015, 0.0038, 0.0027, 0.0022, 0.0049, 0.0016, 0.0044]


def _kernel(track, index, name, ms, flops, kind, sources, hw=True):
    ops = [f"{OPS[n]} at zoo.py:{100 + n}" for n, ks in enumerate(TT_OF if track == "twintrack" else IND_OF)
           if index in ks]
    return {"index": index, "name": name, "kind": kind, "source_ops": ops, "bytes": 262144 * (index + 1),
            "flops": flops, "registers": 22 + index if hw else None, "spills": 0 if hw else None,
            "shared_bytes": 256 if hw else None, "grid": [64 * (index + 1), 1, 1] if hw else None,
            "block": [256, 1, 1] if hw else None, "ms": ms,
            "roofline_fraction": None if ms is None else 0.41, "sources": sources}


def _report():
    tt = [_kernel("twintrack", i, f"forward_kernel_{i}", ms, 0 if i == 3 else 524288 * (i + 1) ** 2, "generic",
                  {"mlir": f"func.func @forward_kernel_{i}(%a: memref<4x8xf32>) {{ <&> }}",
                   "ptx": f".visible .entry forward_kernel_{i}() {{ ret; }}"})
          for i, ms in enumerate(TT_MS)]
    ind = [_kernel("inductor", i, f"triton_per_fused_{i}", ms, 1048576 * (i + 1), "triton",
                   {"triton": f"@triton.jit\ndef triton_per_fused_{i}(in_ptr0, out_ptr0, xnumel): pass",
                    "ttir": "tt.func", "ttgir": "ttg.func", "llir": "define void", "ptx": ".entry"})
           for i, ms in enumerate(IND_MS)]
    # cuBLAS matmul called by Inductor: no flops count, no registers, only a name and a time
    ind[1] = _kernel("inductor", 1, "extern_kernels.mm", 0.0065, None, "extern", {}, hw=False)
    groups = [{"twintrack": [0, 1], "inductor": [0]}, {"twintrack": [2, 3], "inductor": [1]},
              {"twintrack": [4], "inductor": [2]}, {"twintrack": [5], "inductor": [3]},
              {"twintrack": [6], "inductor": [4]}, {"twintrack": [7], "inductor": [5]},
              {"twintrack": [8], "inductor": [6]}, {"twintrack": [9], "inductor": [7, 8, 9]},
              {"twintrack": [10], "inductor": []}]  # the last: twintrack split one of Inductor's kernels
    nodes = [{"id": n, "label": op, "source": f"zoo.py:{100 + n}", "twintrack": TT_OF[n], "inductor": IND_OF[n]}
             for n, op in enumerate(OPS)]
    return {
        "model": "zoo:transformer_block", "device": "cuda", "device_name": "NVIDIA H200",
        "date": "2026-11-30", "torch": "2.13.0+cu130",
        "ceilings": {"bandwidth_gb_s": 4300.0, "tflops": 790.0, "source": "measured copy bandwidth / H200 dense bf16"},
        "tracks": {
            "eager": {"latency_ms": 0.21, "rel_error": 3e-7, "compile_seconds": None, "kernel_count": None, "error": None},
            "inductor": {"latency_ms": 0.15, "rel_error": 2e-7, "compile_seconds": 14.2, "kernel_count": 10, "error": None},
            "twintrack": {"latency_ms": 0.30, "rel_error": 4e-7, "compile_seconds": 3.1, "kernel_count": 11, "error": None},
        },
        "kernels": {"twintrack": tt, "inductor": ind},
        "groups": groups,
        "graph": {"nodes": nodes, "edges": EDGES},
        "notes": ["per-kernel times are CUPTI kernel durations <median of 20>", "eager runs torch's own kernels"],
    }


class _Element:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    def iter(self, tag=None):
        for c in self.children:
            if tag is None or c.tag == tag:
                yield c
            yield from c.iter(tag)

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)

    def title(self):
        return next((c.all_text() for c in self.children if c.tag == "title"), "")


class _TreeBuilder(HTMLParser):
    """Enough of a DOM for Chromium's serialisation: it closes every non-void element."""
    VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "area", "base", "source"}

    def __init__(self):
        super().__init__()
        self.root = self.cur = _Element("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        el = _Element(tag, attrs, self.cur)
        self.cur.children.append(el)
        if tag not in self.VOID:
            self.cur = el

    def handle_endtag(self, tag):
        el = self.cur
        while el.parent and el.tag != tag:
            el = el.parent
        if el.parent:
            self.cur = el.parent

    def handle_data(self, data):
        self.cur.text += data


def _chromium(tmp_path, *args):
    if not Path(CHROMIUM).exists():
        pytest.skip("needs headless Chromium at /usr/bin/chromium: apt-get install chromium")
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare_html")
    report = _report()
    page = tmp / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    proc = _chromium(tmp, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    builder = _TreeBuilder()
    builder.feed(proc.stdout)
    sections = {s.attrs.get("id"): s for s in builder.root.iter("section")}
    return report, page, tmp, sections


def test_sections_present(rendered):
    _, _, _, sections = rendered
    assert {"summary", "kernel-times", "roofline", "fusion-graph", "kernels"} <= set(sections)
    summary = sections["summary"].all_text()
    assert "zoo:transformer_block" in summary and "2.00×" in summary  # 0.30 / 0.15
    assert "4.0e-07" in summary and "<median of 20>" in summary


def test_kernel_time_bars(rendered):
    report, _, _, sections = rendered
    for track in ("twintrack", "inductor"):
        svg = next(s for s in sections["kernel-times"].iter("svg") if s.attrs.get("data-track") == track)
        bars = [r for r in svg.iter("rect") if "bar" in r.attrs.get("class", "")]
        timed = [k for k in report["kernels"][track] if k["ms"] is not None]
        assert len(bars) == len(timed)
        for bar, k in zip(bars, timed):
            assert k["name"] in bar.title() and "GB/s" in bar.title()
    assert "no per-kernel time" in sections["kernel-times"].all_text()


def test_roofline_markers_and_ceilings(rendered):
    report, _, _, sections = rendered
    svg = next(sections["roofline"].iter("svg"))
    ceilings = [e for e in svg.iter("line") if "ceiling" in e.attrs.get("class", "")]
    assert len(ceilings) == 2
    for track, shape in (("twintrack", "circle"), ("inductor", "rect")):
        markers = [e for e in svg.iter(shape) if e.attrs.get("data-track") == track]
        plottable = [k for k in report["kernels"][track] if k["ms"] and k["flops"] and k["bytes"]]
        assert len(markers) == len(plottable) > 0
        assert {m.title().split("\n")[0] for m in markers} == {f"{track} #{k['index']} {k['name']}" for k in plottable}
    assert "Not plotted" in sections["roofline"].all_text()


def test_fusion_graph_nodes(rendered):
    report, _, _, sections = rendered
    svgs = {s.attrs.get("data-track"): s for s in sections["fusion-graph"].iter("svg")}
    assert set(svgs) == {"twintrack", "inductor"}
    for svg in svgs.values():
        ids = [g.attrs["data-id"] for g in svg.iter("g") if g.attrs.get("class") == "node"]
        assert sorted(map(int, ids)) == [n["id"] for n in report["graph"]["nodes"]]


def test_kernel_sources(rendered):
    report, _, _, sections = rendered
    details = [d for d in sections["kernels"].iter("details") if "open" not in d.attrs]
    assert len(details) == len(list(sections["kernels"].iter("details")))  # closed by default
    for track in ("twintrack", "inductor"):
        for k in report["kernels"][track]:
            mine = [d for d in details if d.attrs.get("data-kernel") == f"{track}:{k['index']}"]
            assert [d.attrs["data-source"] for d in mine] == list(k["sources"])
            for d, text in zip(mine, k["sources"].values()):
                assert next(d.iter("pre")).all_text() == text  # escaped on the way in, intact on the way out
    text = sections["kernels"].all_text()
    assert "extern_kernels.mm" in text and "forward_kernel_10" in text


def test_self_contained(rendered):
    _, page, _, _ = rendered
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page.read_text(encoding="utf-8")))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls


def test_screenshot(rendered):
    _, page, tmp, _ = rendered
    png = tmp / "page.png"
    proc = _chromium(tmp, f"--screenshot={png}", "--window-size=1400,3000", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert png.exists() and png.stat().st_size > 10_000


def test_cpu_report_without_times_ceilings_or_inductor():
    """CPU: no per-kernel times, no ceilings, and Inductor failed; the page still renders honestly."""
    report = _report()
    report.update(device="cpu", device_name="cpu", ceilings={"bandwidth_gb_s": None, "tflops": None, "source": None})
    report["tracks"]["inductor"] = {"latency_ms": None, "rel_error": None, "compile_seconds": None,
                                    "kernel_count": None, "error": "InductorError: <lowering failed>"}
    for k in report["kernels"]["twintrack"] + report["kernels"]["inductor"]:
        k.update(ms=None, roofline_fraction=None, registers=None, grid=None, block=None)
    page = render_html(report)
    assert "InductorError: &lt;lowering failed&gt;" in page
    assert 'class="bar"' not in page and 'class="marker"' not in page and 'class="ceiling' not in page
    assert "21 kernel(s) have no per-kernel time" in page and "Plotted: 0 kernels" in page
