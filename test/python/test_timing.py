"""twintrack.harness.timing: the one timing helper of run, compare, bench, gpu_check:
warm-up, enough samples, the median with its spread, and the noisy flag in
the text table, the HTML report and the bench markdown."""

import time

from twintrack.harness.compare.benchmark import markdown_summary
from twintrack.harness.compare.html_report import _summary
from twintrack.harness.compare.table import render_table
from twintrack.harness.timing import NOISY_MARK, MIN_SECONDS, measure, summarize


def test_summary_of_samples():
    steady = summarize([1.0] * 9 + [1.1], warmup=3)
    assert steady.median_ms == 1.0 and steady.samples == 10 and steady.threads >= 1
    assert not steady.noisy and steady.figures()["latency_noisy"] is False
    noisy = summarize([0.4, 0.4, 0.4, 0.4, 0.5, 20, 20, 20, 20, 0.4])
    assert noisy.noisy and noisy.p10_ms <= noisy.median_ms <= noisy.p90_ms
    assert f"{NOISY_MARK} noisy" in noisy.details()


def test_measure_warms_up_and_samples_for_long_enough():
    calls = []
    measurement = measure(lambda: calls.append(time.perf_counter()) or time.sleep(0.001), "cpu", warmup=2, repeat=5,
                          min_seconds=0.05)
    assert measurement.warmup >= 2 and measurement.samples >= 5
    assert len(calls) == measurement.warmup + measurement.samples
    assert calls[-1] - calls[measurement.warmup] >= 0.05 * 0.9
    slow = measure(lambda: time.sleep(0.01), "cpu", warmup=1, repeat=3, min_seconds=0)
    assert slow.samples == 3 and slow.median_ms >= 10
    assert MIN_SECONDS > 0


def _track(median, noisy):
    return {"latency_ms": median, "latency_p10_ms": median * 0.9, "latency_p90_ms": median * (2 if noisy else 1.1),
            "latency_noisy": noisy, "threads": 2, "rel_error": 1e-7, "compile_seconds": 1.0, "kernel_count": 3,
            "error": None}


def _report():
    tracks = {"eager": _track(28.0, True), "inductor": _track(0.2, False), "twintrack": _track(0.3, False)}
    timing = {"threads": 2, "noisy": True, "method": "median of at least 50 runs", "footnote": "~ marks a noisy one"}
    return {"model": "zoo:mlp", "device": "cpu", "device_name": "cpu", "dtype": "float32", "torch": "x",
            "date": "today", "tracks": tracks, "kernels": {"twintrack": [], "inductor": []}, "groups": [],
            "notes": [], "timing": timing, "ceilings": {}}


def test_noisy_measurement_marked_in_the_table_and_html():
    table = render_table(_report())
    assert f"28.0000{NOISY_MARK}" in table and "0.3000 " in table.replace("0.3000\n", "0.3000 ")
    assert "p10-p90" in table and "25.2-56" in table and "~ marks a noisy one" in table and "2 thread(s)" in table
    html = _summary(_report())
    assert 'class="noisy"' in html and "25.2–56" in html and "~ marks a noisy one" in html


def _measured(median, noisy):
    figures = _track(median, noisy)
    del figures["error"]  # bench keeps "error" for failures only
    return figures


def test_noisy_measurement_marked_in_the_bench_markdown():
    row = {"name": "mlp", "dtype": "float32", "eager": _measured(28.0, True),
           "inductor": {"default": _measured(0.2, False)}, "twintrack": _measured(0.3, False), "ratio_vs_inductor": {"default": 1.5}, "ratio_vs_eager": 0.01, "ok": True}
    result = {"date": "today", "device_name": "cpu", "torch": "x", "triton": None, "repeat": 50, "total_seconds": 1,
              "complete": True, "modes": ["default"], "geomean": {"default": 1.5}, "graph_geomean": {},
              "models": [row], "timing": {"threads": 2, "noisy": True, "method": "median of at least 50 runs"}}
    text = markdown_summary(result)
    assert f"28.0000{NOISY_MARK} (25.2–56)" in text and "0.3000 (0.27–0.33)" in text
    assert "2 thread(s)" in text and "noisy" in text.strip().splitlines()[-1]
