"""Fused attention on the GPU track, without a GPU: the transformer and gpt
blocks run each attention (Q·Kᵀ, softmax, P·V) as one flash-attention
kernel that ptxas accepts without spills, two kernels fewer than with the
matmul and row-wise kernels alone. Numerics are checked on a GPU
(tools/gpu_check.py, make gpu-artifacts)."""

import json
import re
import shutil

import pytest
from conftest import copies_read_through, mask_row_tests

from twintrack.tooling import find_libdevice, find_tool

pytestmark = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                reason="needs ptxas and libdevice (the CUDA toolkit)")

REPO_LOWERING = __import__("pathlib").Path(__file__).resolve().parents[2] / "lowering"
BENCH = "batch=8&seq=256&dim=256&heads=8"


def _gpu_artifact(artifact, model, dtype, *flags):
    return artifact(model, "--pipeline", "gpu", "--dtype", dtype, *flags)


def _kernels(outdir) -> list[dict]:
    return json.loads((outdir / "manifest.json").read_text())["kernels"]


@pytest.fixture(scope="module")
def lowering_without_attention_kernels(tmp_path_factory):
    """A copy of lowering/ whose GPU recipe lacks the attention-kernels stage."""
    copy = tmp_path_factory.mktemp("recipes") / "lowering"
    shutil.copytree(REPO_LOWERING, copy)
    recipe = copy / "gpu.toml"
    text = recipe.read_text()
    stripped = re.sub(r'\[\[stage\]\]\nname = "attention-kernels"\n.*?(?=\[\[stage\]\])', "", text, flags=re.S)
    assert stripped != text
    recipe.write_text(stripped)
    return copy


@pytest.mark.parametrize("dtype, path", [("float32", "flash-attention-simt"), ("float16", None)])
@pytest.mark.parametrize("model", ["zoo:transformer_block", "zoo:gpt_block",
                                   f"zoo:transformer_block?{BENCH}", f"zoo:gpt_block?{BENCH}"])
def test_attention_is_one_flash_kernel(artifact, lowering_without_attention_kernels, model, dtype, path):
    outdir = _gpu_artifact(artifact, model, dtype)
    fused = _kernels(outdir)
    flash = [k for k in fused if k["path"].startswith("flash-attention")]
    assert len(flash) == 1, [k["path"] for k in fused]
    kernel = flash[0]
    # f16 takes tensor cores where the head dim is a multiple of 16 (benchmark
    # size: 32); the zoo's head dim of 8 stays on CUDA cores.
    expected = path or ("flash-attention-mma.sync" if BENCH in model else "flash-attention-simt")
    assert kernel["path"].startswith(expected), kernel["path"]
    assert kernel["spills"] == 0 and kernel["block"][0] >= 32
    assert any("bmm" in op for op in kernel["source_ops"])
    if BENCH in model:
        assert _key_loop_end(outdir) == ("causal" if "gpt" in model else "%c256")
    unfused = _kernels(_gpu_artifact(artifact, model, dtype, "--lowering-dir", lowering_without_attention_kernels))
    assert len(unfused) == len(fused) + 2 + copies_read_through(kernel["path"]), \
        ([k["name"] for k in unfused], [k["name"] for k in fused])
    assert not any(k["path"].startswith("flash-attention") for k in unfused)


def _key_loop_end(outdir) -> str:
    """The attention kernel's last key loop bound: a constant, or "causal"
    where it is min(keys, the key tile past the block's last query row) (a
    causal kernel's first loop ends where the mask's diagonal tiles start)."""
    text = next((outdir / "stages").glob("*-attention-kernels.mlir")).read_text()
    end = re.findall(r"scf\.for %\w+ = %\w+ to (%\w+) step %c64 iter_args", text)[-1]
    if end.startswith("%c"):
        return end
    rounded = re.search(rf"{end} = arith\.minui (%\w+), %c256 : index", text).group(1)
    tiles = re.search(rf"{rounded} = arith\.muli (%\w+), %c64 : index", text).group(1)
    past = re.search(rf"{tiles} = arith\.divui (%\w+), %c64 : index", text).group(1)
    assert re.search(rf"{past} = arith\.addi %\w+, %c127 : index", text), past  # m0 + 64 rows + 63
    return "causal"


def test_benchmark_attention_keeps_no_scores_buffer(artifact):
    """The (batch·heads, seq, seq) scores and the softmax's per-row buffers
    are gone from the IR once the attention kernel replaced them."""
    outdir = _gpu_artifact(artifact, f"zoo:transformer_block?{BENCH}", "float32")  # the model's own dtype
    before = next((outdir / "stages").glob("*-reuse-buffers.mlir")).read_text()
    after = next((outdir / "stages").glob("*-attention-kernels.mlir")).read_text()
    assert "memref<64x256x256xf32>" in before
    assert "memref<64x256x256xf32>" not in after and "memref<8x8x256xf32>" not in after
    assert after.count("gpu.launch_func ") == 1 and after.count("gpu.module ") == 1  # outlined at once


def test_flash_schedule_holds_its_decisions():
    """The flash kernel's schedule is data: the ring depth, the look-ahead,
    the staged store and the exp2 flavour are fields, checked where made."""
    from twintrack.compiler.kernels.flash_attention import FlashTileConfig

    schedule = FlashTileConfig(64, 64, 64, tensor_cores=True, stages=3, lookahead=True, staged_store=True)
    assert (schedule.stages, schedule.lookahead, schedule.flushing_exp2) == (3, True, True)
    with pytest.raises(ValueError, match="3 buffers"):
        FlashTileConfig(64, 64, 64, tensor_cores=True, stages=2, lookahead=True)


RAGGED = "python/twintrack/harness/at_scale.py:attention?batch=2&seq=197&head_dim=64"


@pytest.mark.parametrize("dtype, options, generator", [
    ("float16", "&heads=4", "wgmma"), ("float16", "&heads=4&causal=1", "wgmma"),
    ("float16", "&heads=4&mask=1", "wgmma"), ("bfloat16", "&heads=8&kv_heads=2", "wgmma"),
    ("float16", "&heads=4&causal=1", "mma.sync"), ("bfloat16", "&heads=8&kv_heads=2", "mma.sync"),
    ("float32", "&heads=4", "simt")])
def test_a_sequence_no_tile_divides_takes_the_flash_kernel(artifact, dtype, options, generator):
    """197 tokens (ViT's): the flash kernel masks its last query and key
    tiles; the report counts the tokens' work, not the padded tiles'. On
    sm_90a f16 and bf16 take wgmma; without it (sm_90), mma.sync."""
    flags = ("--arch", "sm_90") if generator == "mma.sync" else ()
    kernels = _kernels(_gpu_artifact(artifact, RAGGED + options, dtype, *flags))
    kernels = [k for k in kernels if k not in mask_row_tests(kernels)]
    classes = ["mask-tiles"] if "mask" in options else []  # the boolean mask's tiles, classed first
    assert [k["path"].split()[0] for k in kernels] == classes + [f"flash-attention-{generator}"], kernels
    kernels = kernels[len(classes):]
    kernel = kernels[0]
    assert "masked edges" in kernel["path"] and kernel["spills"] == 0
    heads = 8 if "heads=8" in options else 4
    matmul_flops = 2 * 2 * (2 * heads) * 197 * 197 * 64
    share = 0.5 if "causal" in options else 1.0  # a causal kernel skips the tiles past the diagonal
    assert share * 0.9 < kernel["flops"] / matmul_flops < 1.25, kernel["flops"] / matmul_flops


def test_a_key_projection_writing_keys_transposed_writes_rows_instead(artifact):
    """A ViT layer at 224² (197 tokens): the key projection's epilogue wrote
    Kᵀ (heads, 64, 197), rows no 16-byte vector fits; it now writes K
    (heads, 197, 64) for the flash kernel, and no attention matmul is left
    on the generic path."""
    outdir = _gpu_artifact(artifact, "python/twintrack/harness/at_scale.py:vit?batch=1&layers=1&image=224", "float16")
    kernels = _kernels(outdir)
    assert sum(k["path"].startswith("flash-attention-wgmma") for k in kernels) == 1
    assert not [k for k in kernels if k["path"] == "generic" and any("bmm" in op for op in k["source_ops"])]
    after = next((outdir / "stages").glob("*-attention-kernels.mlir")).read_text()
    assert "memref<1x12x197x64xf16>" in after and "memref<1x12x64x197xf16>" not in after


def test_a_rotary_embedding_writing_keys_transposed_writes_rows_instead(artifact):
    """A LLaMA layer: the rotary embedding of K wrote Kᵀ (heads, 64, seq),
    each store a row apart from the last while it read K's rows; though Kᵀ's
    rows are whole vectors the kernel could read, the rotary now writes K
    (heads, seq, 64), its stores as contiguous as its reads, and the flash
    kernel reads K."""
    model = "python/twintrack/harness/at_scale.py:llama_layer?batch=1&seq=256&dim=256&heads=4&kv_heads=4&ffn=688"
    outdir = _gpu_artifact(artifact, model, "float16")
    plan = json.loads((outdir / "plan.json").read_text())
    flash = [s for s in plan["steps"] if s["op"] == "launch" and "attention" in s["module"]]
    assert len(flash) == 1
    keys = flash[0]["args"][1]["memref"]["sizes"]
    assert keys[-2:] == [256, 64], keys  # (…, seq, head dim): K, not Kᵀ
    # The rotary's loops were swapped with its output: each stores along its innermost loop (the head dim).
    after = next((outdir / "stages").glob("*-attention-kernels.mlir")).read_text()
    maps = dict(re.findall(r"^(#map\d*) = affine_map<(.*)>$", after, re.MULTILINE))
    rotaries = [line for line in after.splitlines() if "linalg.generic" in line and "memref<256x32xf16" in line]
    assert len(rotaries) == 4, rotaries  # Q's and K's halves (elementwise-through-concat), each reading the tables'
    for line in rotaries:
        output_map = maps[re.search(r"indexing_maps = \[.*?(#map\d*)\]", line).group(1)]
        loops, stored = output_map.split(" -> ")
        assert loops == stored, line  # an identity map


def test_grouped_kv_heads_in_a_llama_layer_take_the_wgmma_kernel(artifact):
    """A LLaMA layer with grouped KV heads (8 query heads, 2 KV heads): the
    rotary embedding wrote Kᵀ repeated for each query head's group (kv
    heads, group, 64, seq), and V was copied repeated. The rotary's halves
    now write K's rows for the 2 KV heads, and K and V are read where they
    were written, at each query head's group's head (the repeating copies
    read through); the flash kernel is the wgmma one (it had fallen back to
    mma.sync: Kᵀ's keys run along a row)."""
    model = "python/twintrack/harness/at_scale.py:llama_layer?batch=1&seq=256&dim=512&heads=8&kv_heads=2&ffn=1024"
    outdir = _gpu_artifact(artifact, model, "float16")
    kernels = _kernels(outdir)
    assert [k["path"].split()[0] for k in kernels if "attention" in k["name"]] == ["flash-attention-wgmma"]
    assert not [k for k in kernels if any(op.startswith("aten.expand") for op in k["source_ops"])], kernels
    plan = json.loads((outdir / "plan.json").read_text())
    flash = next(s for s in plan["steps"] if s["op"] == "launch" and "attention" in s["module"])
    keys, values = (flash["args"][i]["memref"] for i in (1, 2))
    assert keys["sizes"] == [1, 2, 256, 64], keys  # K's rows for the 2 KV heads, not 8 copies
    assert values["sizes"] == [2, 256, 64], values  # the 2 KV heads where the projection wrote them, not 8 copies


@pytest.mark.parametrize("options", ["", "&causal=1"])
def test_hopper_attention_runs_on_wgmma_with_scores_in_registers(artifact, options):
    """f16 attention on sm_90a: one wgmma flash kernel of two warpgroups,
    its registers held to two blocks an SM (.minnctapersm 2, at most 128,
    none spilled: the causal mask is one compare with a constant a score;
    no wgmma serialized by ptxas: the waits hold the registers in flight);
    Q·Kᵀ and P·V are wgmmas whose A (Q, then P) is in registers; the
    report counts their flops (4·B·H·S²·D, the visible tiles' under the
    causal mask) though they are written as PTX."""
    model = "python/twintrack/harness/at_scale.py:attention?batch=2&heads=4&seq=512&head_dim=64" + options
    outdir = _gpu_artifact(artifact, model, "float16")
    kernels = _kernels(outdir)
    assert len(kernels) == 1
    assert kernels[0]["path"].startswith("flash-attention-wgmma 128x64x64/2 warpgroups/4 stages/2 blocks an SM")
    kernel = kernels[0]
    assert kernel["block"][0] == 256 and kernel["registers"] <= 128 and kernel["spills"] == 0, kernel
    assert "ptxas_notes" not in kernel, kernel["ptxas_notes"]  # no wgmma serialized (C7513)
    ptx = next((outdir / "kernels").glob("*.ptx")).read_text()
    assert ".minnctapersm 2" in ptx
    register_a = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.f16\.f16 \{[^}]*\}, \{%r", ptx)
    assert sorted(set(register_a)) == ["64"], register_a  # S: 64 keys; O: a head dim of 64
    matmul_flops = 4 * 2 * 4 * 512 * 512 * 64
    # Under the mask, the block of rows q0 … q0 + 127 stops at key q0 + 127.
    share = sum(q0 + 128 for q0 in range(0, 512, 128)) / 4 / 512 if options else 1.0
    assert share < kernel["flops"] / matmul_flops < share * 1.05, kernel["flops"] / matmul_flops


def _attention(keys: int, k_transposed: bool, dynamic_keys: bool = False):
    from mlir import ir

    from twintrack.compiler.kernels.flash_attention import AttentionOperands, OperandSlice
    from twintrack.compiler.kernels.matmul_common import MatmulOperands

    open_keys = ir.ShapedType.get_dynamic_size() if dynamic_keys else keys
    scores = MatmulOperands("", "", "", 8, 197, keys, 64, "f16", "f16", b_transposed=k_transposed)
    values = MatmulOperands("", "", "", 8, 197, 64, keys, "f16", "f16")
    q = OperandSlice((8, 197, 64), ("batch", "tile", "tile"), 64, "f16")
    k = OperandSlice((8, open_keys, 64) if k_transposed else (8, 64, open_keys), ("batch", "tile", "tile"),
                     64 if k_transposed else keys, "f16")
    return AttentionOperands(scores, values, None, None, (q, k, q))


@pytest.mark.parametrize("keys, dynamic_keys", [(197, False), (512, True)])
def test_keys_that_may_run_ragged_must_be_rows_of_k(keys, dynamic_keys):
    """The last key tile is masked by rows (zeros read past the end): K must
    hold a key per row. Stored as Kᵀ (a key per column, 16-byte vectors
    across keys), such keys leave the attention to the matmul kernels."""
    from twintrack.compiler.kernels.flash_attention import choose_flash_tile

    assert choose_flash_tile(_attention(keys, k_transposed=True, dynamic_keys=dynamic_keys)) is not None
    assert choose_flash_tile(_attention(keys, k_transposed=False, dynamic_keys=dynamic_keys)) is None
    assert choose_flash_tile(_attention(256, k_transposed=False)) is not None


VIEWS = """
func.func @views(%n: index, %b: index, %s: index, %h: index) {
  %rows = memref.alloc(%n) : memref<?x384xf32>
  %split = memref.expand_shape %rows [[0, 1], [2]] output_shape [%b, %s, 384] : memref<?x384xf32> into memref<?x?x384xf32>
  %k = memref.subview %split[0, 0, 128] [%b, %s, 128] [1, 1, 1] : memref<?x?x384xf32> to memref<?x?x128xf32, strided<[?, 384, 1], offset: 128>>
  %heads = memref.expand_shape %k [[0], [1], [2, 3]] output_shape [%b, %s, 4, 32] : memref<?x?x128xf32, strided<[?, 384, 1], offset: 128>> into memref<?x?x4x32xf32, strided<[?, 384, 32, 1], offset: 128>>
  %odd = memref.subview %split[0, 0, 130] [%b, %s, 128] [1, 1, 1] : memref<?x?x384xf32> to memref<?x?x128xf32, strided<[?, 384, 1], offset: 130>>
  %narrow = memref.alloc(%n) : memref<?x6xf32>
  %rows6 = memref.expand_shape %narrow [[0, 1], [2]] output_shape [%b, %s, 6] : memref<?x6xf32> into memref<?x?x6xf32>
  return
}
"""


def test_vectors_along_views_of_run_time_strides():
    """A slice of a projection's (B, S, 384) output has a run-time batch
    stride (S·384), which its type cannot show aligned; the views it is made
    of can: 16-byte vectors fit its rows, and its heads' rows. A slice at
    an offset of 130 floats, or rows of 6, do not."""
    from mlir import ir

    from twintrack.bindings import new_context
    from twintrack.compiler.passes.ir_helpers import view_vectors_fit

    with new_context("mlir"), ir.Location.unknown():
        module = ir.Module.parse(VIEWS)
        values = [op.results[0] for op in module.body.operations[0].regions[0].blocks[0] if len(op.results) == 1]
        _, split, k, heads, odd, _, rows6 = values  # in the order the function makes them
        assert view_vectors_fit(split, 4) and view_vectors_fit(k, 4) and view_vectors_fit(heads, 4)
        assert not view_vectors_fit(odd, 4) and not view_vectors_fit(rows6, 4)


def test_ptxas_performance_notes_reach_the_kernel_report():
    """ptxas's "Potential Performance Loss" lines (a serialized wgmma) are
    kept with the kernel's resources, its function name dropped."""
    from twintrack.compiler.gpu_codegen import parse_ptxas_report

    report = parse_ptxas_report(
        "ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized "
        "due to non wgmma instructions defining input registers of a wgmma between start and end of the "
        "pipeline stage in the function 'forward_attention_0'\n"
        "ptxas info    : Used 126 registers, used 1 barriers\n"
        "    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n")
    assert (report.registers, report.spills) == (126, 16)
    assert report.performance_notes == ("C7513: wgmma.mma_async instructions are serialized due to non wgmma "
                                        "instructions defining input registers of a wgmma between start and end "
                                        "of the pipeline stage",)
    assert parse_ptxas_report("ptxas info    : Used 32 registers").performance_notes == ()


STRUCTURED = "test/python/masked_attention.py:structured_attention?batch=2&heads=4&seq=512&dim=64"


@pytest.mark.parametrize("flags, generator", [((), "wgmma"), (("--arch", "sm_90"), "mma.sync")])
def test_a_boolean_mask_is_classed_in_tiles_before_the_flash_kernel(artifact, flags, generator):
    """A (batch, 1, seq, seq) boolean mask: a kernel classes its tiles (one
    block per batch entry and query tile of the flash kernel's) and packs
    it a bit a key; each flash block ends its keys where the classes say
    the last visible tile is, and reads its rows' bits of a tile in one
    load, not the mask's bytes. The wgmma kernel also reads no mask in the
    tiles that hide no key: of its softmax's two branches only the masked
    one loads the bits."""
    outdir = _gpu_artifact(artifact, STRUCTURED, "float16", *flags)
    kernels = [k for k in _kernels(outdir) if k not in mask_row_tests(_kernels(outdir))]
    assert [k["path"].split()[0] for k in kernels] == ["mask-tiles", f"flash-attention-{generator}"], kernels
    classes, flash = kernels
    rows = 128 if generator == "wgmma" else 64
    assert classes["grid"][:2] == [2, 512 // rows] and flash["spills"] <= 8, (classes, flash)
    mask_bytes = 2 * 512 * 512
    assert mask_bytes * 9 / 8 <= classes["bytes"] < mask_bytes * 9 / 8 * 1.01  # the mask read once, its bits written
    module = _parse_stage(outdir, "attention-kernels")
    summary = f"memref<2x{512 // rows}x9xi32>"  # (batch, query tiles, key tiles + the tiles to run)
    flash_function = _function(module, "forward_attention_0")
    assert any("memref.load %arg0" in str(op) and summary in str(op) for op in _walk(flash_function))
    assert not any(_reads(op, "xi1>") for op in _walk(flash_function))
    bits = [op for op in _walk(flash_function) if _reads(op, "x32xi16>")]  # 8 key tiles of 4 chunks a row
    assert bits and all(str(op.results[0].type) == "vector<4xi16>" for op in bits)
    if generator == "wgmma":
        branches = [op for op in _walk(flash_function) if op.name == "scf.if" and len(op.results) > 0 and
                    any(_reads(inner, "x32xi16>") for inner in _walk(op))]
        assert len(branches) == 2  # the first key tile's softmax, and the key loop's
        for branch in branches:
            masked, clear = branch.regions
            assert any(_reads(op, "x32xi16>") for op in _walk(masked))
            assert not any(_reads(op, "x32xi16>") for op in _walk(clear))


def test_a_padded_llama_skips_the_keys_past_its_causal_diagonal(artifact):
    """Hugging Face's LLaMA called with an attention mask hides a score
    unless key <= row and the key is not padding (a gather from the mask):
    the causal half still bounds each block's keys, so the flash kernel
    skips the tiles past the diagonal (a block of 128 rows from q0 runs
    q0 + 128 keys) and applies the whole condition itself."""
    pytest.importorskip("transformers", reason="needs transformers (Hugging Face models)")
    factories = __import__("pathlib").Path(__file__).with_name("real_models.py")
    kernels = _kernels(_gpu_artifact(artifact, f"{factories}:llama_padded", "float16"))
    flash = [k for k in kernels if k["path"].startswith("flash-attention-wgmma")]
    assert len(flash) == 1 and flash[0]["spills"] == 0
    full = 4 * 2 * 4 * 256 * 256 * 64  # two matmuls, batch 2, 4 heads, 256 tokens, head dim 64
    share = (128 + 256) / 2 / 256
    assert share <= flash[0]["flops"] / full < share * 1.05, flash[0]["flops"] / full


def test_a_mask_over_two_key_tiles_is_read_as_it_is(artifact):
    """At 128 keys (two tiles) classing the mask would cost a kernel more
    than it saves (`MIN_KEY_TILES`): the flash kernel reads the mask itself."""
    kernels = _kernels(_gpu_artifact(artifact, "test/python/masked_attention.py:padded_attention", "float16"))
    assert [k["path"].split()[0] for k in kernels if k not in mask_row_tests(kernels)] == ["flash-attention-wgmma"]


def _parse_stage(outdir, stage: str):
    from mlir import ir

    from twintrack.bindings import new_context
    text = next((outdir / "stages").glob(f"*-{stage}.mlir")).read_text()
    context = new_context("mlir")
    context.allow_unregistered_dialects = True
    with context, ir.Location.unknown():
        return ir.Module.parse(text), context


def _function(parsed, name: str):
    module, _ = parsed
    return next(op for op in _walk(module.operation) if op.name == "gpu.func" and
                op.attributes["sym_name"].value == name)


def _walk(op_or_region):
    """Every op nested in an op or a region, outer first."""
    from mlir import ir
    regions = [op_or_region] if isinstance(op_or_region, ir.Region) else op_or_region.regions
    for region in regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


def _reads(op, memref_type_end: str) -> bool:
    """Is `op` a load from a memref whose type ends so (its last size and element)?"""
    return op.name in ("memref.load", "vector.load") and str(op.operands[0].type).endswith(memref_type_end)


SCORE_BODIES = {  # a score epilogue's body: acc, then (where read) a bool mask or an additive one
    "scale": "%s = arith.mulf %acc, %c : f32\n linalg.yield %s : f32",
    "scale then hide": "%s = arith.mulf %acc, %c : f32\n %h = arith.select %keep, %s, %ninf : f32\n"
                       " %n = arith.truncf %h : f32 to f16\n linalg.yield %n : f16",
    "scale then add": "%s = arith.mulf %acc, %c : f32\n %a = arith.addf %s, %add : f32\n linalg.yield %a : f32",
    "negative scale": "%s = arith.mulf %acc, %neg : f32\n linalg.yield %s : f32",
    "hide by the score": "%s = arith.mulf %acc, %c : f32\n %p = arith.cmpf ogt, %s, %add : f32\n"
                         " %h = arith.select %p, %s, %ninf : f32\n linalg.yield %h : f32",
}


@pytest.mark.parametrize("body, peeled", [("scale", (None, 0.125)), ("scale then hide", ("kept", 0.125)),
                                          ("scale then add", ("kept", None)), ("negative scale", ("kept", None)),
                                          ("hide by the score", ("kept", None))])
def test_the_softmax_scale_leaves_the_score_epilogue_only_where_it_commutes(body, peeled):
    """softmax(c·s) = exp2((s - max s)·c·log2 e) for c > 0, so the flash
    kernel folds c into its exponent; only where the rest of the epilogue
    would give the same scaled before or after it (masks of -inf, the
    narrowing the kernel drops), and c > 0."""
    from mlir import ir

    from twintrack.compiler.kernels.epilogue import Epilogue, EpilogueInput
    from twintrack.compiler.kernels.softmax_scale import peel_softmax_scale
    from twintrack.compiler.passes.generic_body import describe_body

    out = "f16" if "truncf" in SCORE_BODIES[body] else "f32"
    source = f"""
    #id = affine_map<(d0) -> (d0)>
    func.func @f(%scores: tensor<4xf32>, %keeps: tensor<4xi1>, %adds: tensor<4xf32>, %init: tensor<4x{out}>)
        -> tensor<4x{out}> {{
      %c = arith.constant 0.125 : f32
      %neg = arith.constant -0.125 : f32
      %ninf = arith.constant 0xFF800000 : f32
      %r = linalg.generic {{indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}}
          ins(%scores, %keeps, %adds : tensor<4xf32>, tensor<4xi1>, tensor<4xf32>) outs(%init : tensor<4x{out}>) {{
      ^bb0(%acc: f32, %keep: i1, %add: f32, %o: {out}):
        {SCORE_BODIES[body]}
      }} -> tensor<4x{out}>
      return %r : tensor<4x{out}>
    }}"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(source)
        generic = next(op for op in module.body.operations[0].regions[0].blocks[0].operations
                       if op.operation.name == "linalg.generic").operation
        ops, result = describe_body(generic)
        epilogue = Epilogue((EpilogueInput(None), EpilogueInput("memref<4xi1>", (0,)),
                             EpilogueInput("memref<4xf32>", (0,))), ops, result)
        remaining, scale = peel_softmax_scale(epilogue)
        expected_epilogue, expected_scale = peeled
        assert scale == expected_scale
        if expected_epilogue is None:
            assert remaining is None
        elif scale is None:
            assert remaining is epilogue
        else:
            assert [op.name for op in remaining.ops] == ["arith.select", "arith.truncf"]
            assert remaining.ops[0].operands[1] == ("arg", 0)  # the select now hides the unscaled score


def test_a_head_dim_of_128_folds_its_softmax_scale_into_the_exponent(artifact):
    """1/√128 is no power of two: PyTorch scales the f32 scores, and so does
    the flash kernel, in the factor of its exp2 (log2 e/√128) rather than a
    multiplication per score or a rounded copy of Q."""
    outdir = _gpu_artifact(artifact, "python/twintrack/harness/at_scale.py:attention?batch=1&heads=2&seq=1024"
                                     "&head_dim=128&causal=1", "float16")
    kernels = _kernels(outdir)
    assert [k["path"].split()[0] for k in kernels] == ["flash-attention-tma-wgmma"], kernels
    assert kernels[0]["flops"] < 0.6 * 2 * 2 * 2 * 1024 * 1024 * 128  # the causal tiles skipped: its own mask
    text = next((outdir / "stages").glob("*-attention-kernels.mlir")).read_text()
    factor = re.findall(r"arith\.constant (-?[0-9.e+-]+) : f32", text)
    assert any(abs(float(v) - 1.4426950408889634 / 128 ** 0.5) < 1e-6 for v in factor), sorted(set(factor))
    assert not any(abs(abs(float(v)) - 128 ** -0.5) < 1e-6 for v in factor)
