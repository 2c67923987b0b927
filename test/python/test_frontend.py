"""Frontend inputs and the staged Python API."""

import json
import re

import torch

import twintrack
from twintrack.harness import zoo
from twintrack.harness.numerics import relative_error


def test_parameters_are_arguments_unless_frozen(run_tool, tmp_path):
    assert run_tool("compile", "zoo:mlp", "-o", tmp_path / "a", "-q").returncode == 0
    assert run_tool("compile", "zoo:mlp", "-o", tmp_path / "f", "-q", "--freeze").returncode == 0
    free = json.loads((tmp_path / "a" / "manifest.json").read_text())
    frozen = json.loads((tmp_path / "f" / "manifest.json").read_text())
    assert [a["kind"] for a in free["arguments"]].count("parameter") == 6
    assert [a["kind"] for a in frozen["arguments"]] == ["input"]
    assert run_tool("run", tmp_path / "f", "--check").returncode == 0


def test_torch_export_file(run_tool, tmp_path):
    module, inputs = zoo.build("layernorm")
    torch.export.save(torch.export.export(module, inputs), tmp_path / "model.pt")
    assert run_tool("compile", tmp_path / "model.pt", "-o", tmp_path / "o", "-q").returncode == 0
    result = run_tool("run", tmp_path / "o", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_python_factory(run_tool, tmp_path):
    (tmp_path / "m.py").write_text(
        "import torch\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), (torch.randn(3, 8),)\n")
    assert run_tool("compile", f"{tmp_path / 'm.py'}:make", "-o", tmp_path / "o", "-q").returncode == 0
    assert run_tool("run", tmp_path / "o", "--check").returncode == 0


def test_staged_api_and_state_dict_swap():
    module, (x,) = zoo.build("mlp")
    exported = twintrack.export(module, (x,))
    assert "aten.addmm" in exported.as_text()
    lowered = exported.lower(to="affine")
    assert lowered.stage == "affine" and "affine.for" in lowered.as_text()
    compiled = lowered.compile("cpu")
    fresh = torch.randn_like(x)
    assert relative_error(compiled(fresh), module.double()(fresh.double())) < 1e-5
    module.float()


def test_compile_returns_a_callable():
    module, (x, y) = zoo.build("elementwise")
    compiled = twintrack.compile(module, (x, y))
    with torch.no_grad():
        reference = module.double()(x.double(), y.double())
    assert relative_error(compiled(x, y), reference) < 1e-5


def _attention_program(dtype, **sdpa_options):
    from twintrack.frontend.export import ModelSource, export_model

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, **sdpa_options)
            return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)  # a view traced against the layout

    inputs = tuple(torch.randn(2, 4, 16, 8).to(dtype) for _ in range(3))
    # the exported program returns its results as a flat tuple (calling.py)
    return export_model(ModelSource("<attention>", Attention(), inputs)).program, inputs, Attention()


def _attention_matmuls(dtype, **sdpa_options) -> list[tuple[str, str, str]]:
    """(A, B, C) element types of each batch matmul of the attention, once legalized."""
    model = _attention_program(dtype, **sdpa_options)[2]
    inputs = tuple(torch.randn(2, 4, 16, 8).to(dtype) for _ in range(3))
    text = twintrack.export(model, inputs).lower(to="legalize").as_text()
    return re.findall(r"linalg\.batch_matmul ins\(.*: tensor<[0-9x]*x(\w+)>, tensor<[0-9x]*x(\w+)>\) "
                      r"outs\(.*: tensor<[0-9x]*x(\w+)>\)", text)


def test_plain_fp16_attention_reads_fp16_keeps_f32_scores_and_matches_eager():
    """PyTorch's decomposition would widen Q, K and V (f32 matmuls); its
    kernels read fp16 and keep the scores f32: so does this one (Q·Kᵀ f16
    in, f32 out; P rounded to f16 for P·V)."""
    assert _attention_matmuls(torch.float16, is_causal=True) == [("f16", "f16", "f32"), ("f16", "f16", "f32")]
    program, inputs, model = _attention_program(torch.float16, is_causal=True)
    scores = next(n for n in program.graph.nodes if n.target is torch.ops.aten.bmm.default)
    assert scores.meta["val"].dtype == torch.float32
    wide = [x.double() for x in inputs]
    reference = model(*wide)
    assert relative_error(program.module()(*inputs)[0], reference) < 1e-2
    program32, inputs32, _ = _attention_program(torch.float32, is_causal=True)
    assert relative_error(program32.module()(*inputs32)[0], model(*[x.double() for x in inputs32])) < 1e-5


def test_half_attention_over_a_run_time_sequence_reads_fp16_through_its_views():
    """The widened K is transposed over a run-time length: the fold rebuilds
    the transpose (its size read off the tensor) on the f16 tensor; one
    compile serves each length."""
    class Causal(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    inputs = tuple(torch.randn(2, 4, 16, 8).half() for _ in range(3))
    dynamic = ",".join(f"{name}:2=s[2,64]" for name in "qkv")
    lowered = twintrack.export(Causal(), inputs, dynamic=dynamic).lower(to=None)
    assert re.search(r"linalg\.batch_matmul ins\(.*: tensor<\d+x\?x8xf16>, tensor<\d+x8x\?xf16>\)",
                     lowered.as_text("legalize"))
    compiled = lowered.compile("cpu")
    for length in (5, 33):
        fresh = tuple(torch.randn(2, 4, length, 8).half() for _ in range(3))
        reference = Causal()(*(x.double() for x in fresh))
        assert relative_error(compiled(*fresh), reference) < 1e-2


def test_masked_attention_decomposes_in_its_dtype_and_layout():
    """Boolean and additive masks, fp16 too: two bmms reading the inputs'
    dtype, and the view traced after the attention still applies (GPT-2's case)."""
    mask = torch.rand(16, 16) > 0.3
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.float16, 1e-2)):
        for attn_mask in (mask, torch.randn(16, 16).to(dtype)):
            program, inputs, model = _attention_program(dtype, attn_mask=attn_mask)
            matmuls = [n for n in program.graph.nodes if n.target is torch.ops.aten.bmm.default]
            read = str(dtype).removeprefix("torch.").replace("float", "f")
            assert len(matmuls) == 2 and \
                _attention_matmuls(dtype, attn_mask=attn_mask) == [(read, read, "f32")] * 2
            wide = [x.double() for x in inputs]
            reference = torch.nn.functional.scaled_dot_product_attention(
                *wide, attn_mask=attn_mask if attn_mask.dtype == torch.bool else attn_mask.double())
            reference = reference.transpose(1, 2).reshape(2, 16, -1)
            assert relative_error(program.module()(*inputs)[0], reference) < tolerance


def test_attention_rows_the_mask_takes_whole_are_zeros_as_eager():
    """A query row with every score masked (padding): eager's safe softmax
    makes it zeros, not the NaN of a softmax of -infs; the other rows as before."""
    keep = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
    keep[[2, 9]] = False
    additive = torch.zeros(16, 16).masked_fill(~keep, float("-inf"))
    for attn_mask in (keep, additive):
        program, inputs, _ = _attention_program(torch.float32, attn_mask=attn_mask)
        reference = torch.nn.functional.scaled_dot_product_attention(
            *[x.double() for x in inputs], attn_mask=attn_mask if attn_mask.dtype == torch.bool else attn_mask.double())
        reference = reference.transpose(1, 2).reshape(2, 16, -1)
        result = program.module()(*inputs)[0]
        assert not result.isnan().any() and (result[:, [2, 9]] == 0).all()
        assert relative_error(result, reference) < 1e-5


def test_torch_export_file_with_constants_and_dtypes(run_tool, tmp_path):
    """A graph that holds a tensor constant and names float32 checks against
    float64 (op by op, widened) and runs on the device its weights go to."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.randn(8, 16)  # a plain tensor: export keeps it as a constant

        def forward(self, x):
            return (x @ self.table.T).to(torch.float32) + torch.arange(8, dtype=torch.float32)

    inputs = (torch.randn(4, 16),)
    torch.export.save(torch.export.export(Scaled(), inputs), tmp_path / "scaled.pt2")
    assert run_tool("compile", tmp_path / "scaled.pt2", "-o", tmp_path / "o", "-q").returncode == 0
    result = run_tool("run", tmp_path / "o", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    from twintrack.frontend.export import load_model
    assert "table" in dict(load_model(str(tmp_path / "scaled.pt2")).module.named_buffers())


class _PrimsViews(torch.nn.Module):
    """Every prims view a model may call directly, chained."""

    def forward(self, x):
        prims = torch.ops.prims
        squeezed = prims.squeeze(x, [1])                                        # (4, 4)
        split = prims.split_dim(prims.view_of(squeezed), 1, 2)                  # (4, 2, 2)
        collapsed = prims.collapse_view(split, 1, 2)                            # (4, 4), dims 1 to 2 included
        broadcast = prims.broadcast_in_dim(collapsed[:, :1], [4, 3, 5], [0, 2])  # (4, 3, 5)
        moved = prims.transpose(broadcast, [2, 0, 1])                           # (5, 4, 3)
        bits = prims.view_of_dtype(moved, torch.int32)
        return moved * 2, bits + 1


def test_prims_views_become_aten_views():
    """run_decompositions refuses a prims op whose result aliases its input;
    each prims view becomes its ATen view before it, and computes as eager."""
    module, x = _PrimsViews(), torch.randn(4, 1, 4)
    got, expected = twintrack.compile(module, (x,))(x), module(x)
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))
