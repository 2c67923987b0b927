"""The flash-attention kernel fed by a TMA producer warpgroup (sm_90a):
which attentions the tile table gives it, what its PTX holds, and the
table and register arithmetic it is built from."""

from __future__ import annotations

import json
import shutil

import pytest

from twintrack.errors import UsageError
from twintrack.tooling import find_libdevice, find_tool

pytestmark = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                reason="needs ptxas and libdevice (the CUDA toolkit)")

ATTENTION = "python/twintrack/harness/at_scale.py:attention?batch=1&heads=2"


def _flash_kernel(artifact, model: str, dtype: str = "float16") -> tuple[dict, str, dict]:
    """The artifact's one flash kernel: its report, its PTX and its launch step."""
    outdir = artifact(model, "--pipeline", "gpu", "--dtype", dtype)
    kernels = [k for k in json.loads((outdir / "manifest.json").read_text())["kernels"] if k["name"].startswith("forward_attention") and k["path"] != "mask-tiles"]
    assert len(kernels) == 1, kernels
    ptx = (outdir / "kernels" / f"{kernels[0]['name']}.ptx").read_text()
    plan = json.loads((outdir / "plan.json").read_text())
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and "attention" in s["module"])
    return kernels[0], ptx, launch


def _boxes(launch: dict) -> list[tuple[int, int]]:
    """The (keys, columns) box of each tensor map the launch passes, its batch dims checked to be 1."""
    boxes = [a["tensor_map"]["box"] for a in launch["args"] if "tensor_map" in a]
    assert all(set(box[:-2]) <= {1} for box in boxes), boxes
    return [tuple(box[-2:]) for box in boxes]


@pytest.mark.parametrize("options", ["", "&causal=1"])
def test_a_long_attention_takes_k_and_v_from_a_producer_warpgroup(artifact, options):
    """2048 keys at a head dim of 64: two consumer warpgroups of 64 rows
    and a producer warpgroup (384 threads) that copies each 128-key tile of
    K and V with one TMA copy (64 columns of 128 bytes), completing on the
    ring's mbarriers; the producer gives registers to the consumers
    (setmaxnreg 24 and 240, which ptxas honours: one block an SM asked),
    the consumers take turns at two named barriers, and no call
    (an IEEE reciprocal) serializes the wgmmas."""
    kernel, ptx, launch = _flash_kernel(artifact, f"{ATTENTION}&seq=2048&head_dim=64{options}")
    assert kernel["path"].startswith("flash-attention-tma-wgmma 128x128x64/2 warpgroups/4 stages/"
                                     "TMA producer warpgroup/turns"), kernel["path"]
    assert kernel["block"][0] == 384 and kernel["spills"] == 0, kernel
    assert "ptxas_notes" not in kernel, kernel["ptxas_notes"]
    assert "cp.async.bulk.tensor" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 \t240" in ptx and "setmaxnreg.dec.sync.aligned.u32 \t24" in ptx
    assert ".minnctapersm 1" in ptx
    assert "mbarrier.try_wait.parity" in ptx and "bar.arrive" in ptx
    assert "rcp.rn" not in ptx and "call" not in ptx
    assert _boxes(launch) == [(128, 64)] * 2  # K (read as the model wrote it, heads a dim of their own) and V
    assert sum("tensor_map" not in a for a in launch["args"]) == 2  # Q and O: K and V only through their maps


def test_a_head_dim_of_128_copies_two_columns_of_each_tile(artifact):
    """Head dim 128 (LLaMA's): 64-key tiles (a 128-key ring would not fit
    beside Q), two 64-column TMA boxes of K and of V a tile, no turns."""
    kernel, ptx, launch = _flash_kernel(artifact, f"{ATTENTION}&seq=256&head_dim=128&causal=1")
    assert kernel["path"].startswith("flash-attention-tma-wgmma 128x64x128/2 warpgroups/4 stages/"
                                     "TMA producer warpgroup"), kernel["path"]
    assert "/turns" not in kernel["path"] and kernel["spills"] == 0
    assert "cp.async.bulk.tensor" in ptx
    assert _boxes(launch) == [(64, 64)] * 2  # each copied as two boxes of 64 columns


@pytest.mark.parametrize("model, why", [
    (f"{ATTENTION}&seq=512&head_dim=64", "512 keys: a short loop"),
    (f"{ATTENTION}&seq=2048&head_dim=64&mask=1", "a boolean mask"),
    (f"{ATTENTION}&seq=197&head_dim=128", "197 tokens: blocks of 64 rows"),
])
def test_what_the_table_keeps_on_the_cp_async_kernel(artifact, model, why):
    """The table's TMA entries leave these to the cp.async wgmma kernel,
    measured faster there or not measured."""
    kernel, ptx, _ = _flash_kernel(artifact, model)
    assert kernel["path"].startswith("flash-attention-wgmma "), (why, kernel["path"])
    assert "cp.async.bulk.tensor" not in ptx


def test_the_tile_table_names_the_entry_it_cannot_read(tmp_path):
    from twintrack.compiler.kernels.flash_attention import load_flash_tiles
    from twintrack.compiler.target import DEFAULT_LOWERING_DIR

    lowering = tmp_path / "lowering"
    shutil.copytree(DEFAULT_LOWERING_DIR, lowering)
    table = lowering / "tuning" / "attention.toml"
    table.write_text("[[wgmma_flash]]\nwarpgroups = 2\nkeys = 64\nmax_stages = 4\nblocks_per_sm = 1\n"
                     "producer = true\nping_pong = true\n")
    with pytest.raises(UsageError, match=r"attention\.toml: a wgmma_flash entry: .*ping_pong"):
        load_flash_tiles(lowering)
    table.write_text("[[wgmma_flash]]\nwarpgroups = 0\nkeys = 64\nmax_stages = 4\nblocks_per_sm = 1\n"
                     "producer = true\n")
    with pytest.raises(UsageError, match=r"a wgmma_flash entry: .*positive integers"):
        load_flash_tiles(lowering)
    table.unlink()
    with pytest.raises(UsageError, match=r"attention\.toml: no such file"):
        load_flash_tiles(lowering)
    last = load_flash_tiles()[-1]  # the cp.async kernel, taking every attention the kernel applies to
    assert not last.producer and last.head_dims == (64, 128) and last.boolean_masks and last.fewer_rows
    assert last.min_keys == 0


def test_consumers_take_what_the_producer_gives_within_the_block_share():
    """setmaxnreg never asks for more than the block got at entry (an
    increase past it waits forever): 384 threads get 168 registers each at
    one block an SM, 80 at two."""
    from twintrack.compiler.kernels.barrier_ring import consumer_registers

    assert consumer_registers(2, 40) == 232  # the TMA matmul's: 2·128·232 + 128·40 <= 384·168
    assert consumer_registers(2, 24) == 240
    assert consumer_registers(3, 24) == 160  # 512 threads: 128 each at entry
    assert consumer_registers(2, 24, blocks_per_sm=2) == 104  # 2·128·104 + 128·24 <= 384·80
