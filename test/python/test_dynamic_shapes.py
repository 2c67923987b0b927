"""Dynamic shapes on the CPU: one compile serves every size in the ranges
it was given (a BERT encoder over batch and sequence, a LLaMA-style decode
step over its growing KV cache), checked against float64 eager at sizes
drawn afresh; a call outside the ranges, and a spec the model contradicts,
are clear errors."""

import json
import re
import sys
from pathlib import Path

import pytest
import sympy
import torch

import twintrack
from twintrack.dynamic_shapes import DynamicDim, concrete_shape, parse_dynamic
from twintrack.errors import InputMismatchError, UsageError
from twintrack.frontend.fx_passes.symbolic_views import dim_groups
from twintrack.harness.at_scale import llama_decode_step
from twintrack.harness.numerics import relative_error

sys.path.insert(0, str(Path(__file__).parent))
import real_models  # noqa: E402

BERT_SPEC = "ids:0=batch[1,64],ids:1=seq[1,512]"


class LinearNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(32, 64), torch.nn.LayerNorm(64)

    def forward(self, x):
        return torch.softmax(self.norm(torch.relu(self.linear(x))), -1) * 2


class Blocks(torch.nn.Module):
    """Splits its sequence into blocks of 8: sizes that are expressions of seq."""
    def forward(self, x):
        b, s, d = x.shape
        return x.reshape(b, s // 8, 8, d).sum(2) + 1


def float64_error(model, compiled, *inputs) -> float:
    reference = model.double()(*(x.double() if x.is_floating_point() else x for x in inputs))
    model.float()
    return relative_error(compiled(*inputs), reference)


@pytest.fixture(scope="module")
def linear_norm():
    model = LinearNorm().eval()
    return model, twintrack.compile(model, (torch.randn(4, 8, 32),), dynamic="x:0=batch[1,64],x:1=seq[1,512]")


@pytest.fixture(scope="module")
def bert():
    model, _ = real_models.bert(positions=512)
    example = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    return model, twintrack.compile(model, (example,), dynamic=BERT_SPEC)


def bert_shapes(count: int = 20) -> list[tuple[int, int]]:
    """The ranges' ends, prime sequence lengths, and sizes drawn at random."""
    chosen = [(1, 1), (64, 512), (1, 512), (64, 1), (3, 509), (5, 127)]
    generator = torch.Generator().manual_seed(19)
    while len(chosen) < count:
        chosen.append((int(torch.randint(1, 17, (), generator=generator)),
                       int(torch.randint(1, 257, (), generator=generator))))
    return chosen


def test_bert_encoder_serves_every_shape_from_one_compile(bert):
    model, compiled = bert
    inputs = compiled.exported.exported.inputs
    assert inputs[0].shape == ("batch", "seq")
    generator = torch.Generator().manual_seed(7)
    errors = {}
    for batch, seq in bert_shapes():
        ids = torch.randint(0, 128, (batch, seq), generator=generator)
        errors[(batch, seq)] = float64_error(model, compiled, ids)
    assert len(errors) == 20
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-5, f"{worst}: relative error {errors[worst]:.2e}"


def test_llama_decode_steps_grow_the_cache_from_one_compile():
    model, example = llama_decode_step()
    compiled = twintrack.compile(model, example, dynamic="k_cache:2=kv[1,1024],v_cache:2=kv[1,1024]")
    assert compiled.exported.exported.outputs[1].shape == (1, 2, "1 + kv", 16)
    reference = llama_decode_step()[0].double()
    generator = torch.Generator().manual_seed(3)
    k, v = (torch.randn(1, 2, 1, 16, generator=generator) for _ in range(2))
    errors = []
    for _ in range(48):  # the cache grows from 1 to 49 entries, each step's output feeding the next
        x = torch.randn(1, 1, 64, generator=generator)
        y, k_next, v_next = compiled(x, k, v)
        expected = reference(x.double(), k.double(), v.double())
        errors += [relative_error(got, want) for got, want in zip((y, k_next, v_next), expected)]
        k, v = k_next, v_next
    assert k.shape == (1, 2, 49, 16) and max(errors) < 1e-5
    full = [torch.randn(1, 2, 1024, 16, generator=generator) for _ in range(2)]
    x = torch.randn(1, 1, 64, generator=generator)
    y, k_next, _ = compiled(x, *full)
    assert k_next.shape == (1, 2, 1025, 16)
    assert relative_error(y, reference(x.double(), *(t.double() for t in full))[0]) < 1e-5
    with pytest.raises(InputMismatchError, match=r"kv\) is 1025; compiled for kv in \[1, 1024\]"):
        compiled(x, k_next, k_next)


def test_sizes_in_range_match_float64(linear_norm):
    model, compiled = linear_norm
    for shape in [(1, 1, 32), (64, 512, 32), (3, 17, 32), (64, 1, 32)]:
        x = torch.randn(shape)
        assert compiled(x).shape == (*shape[:2], 64)
        assert float64_error(model, compiled, x) < 1e-5, shape


def test_a_call_outside_the_range_names_the_dim(linear_norm):
    _, compiled = linear_norm
    with pytest.raises(InputMismatchError, match=r"input0 dim 0 \(batch\) is 65; compiled for batch in \[1, 64\]"):
        compiled(torch.randn(65, 3, 32))
    with pytest.raises(InputMismatchError, match=r"expected float32\[batch, seq, 32\] \(here \[6, 3, 32\]\)"):
        compiled(torch.randn(6, 3, 31))


def test_a_multiple_and_sizes_computed_from_it():
    model = Blocks()
    compiled = twintrack.compile(model, (torch.randn(2, 16, 4),), dynamic="x:0=b[1,8],x:1=seq[8,64]%8")
    assert compiled.exported.exported.outputs[0].shape == ("b", "seq // 8", 4)
    for shape in [(1, 8, 4), (8, 64, 4), (3, 40, 4)]:
        x = torch.randn(shape)
        assert float64_error(model, compiled, x) < 1e-6, shape
    with pytest.raises(InputMismatchError, match="is 12; compiled for seq in \\[8, 64\\], a multiple of 8"):
        compiled(torch.randn(2, 12, 4))


def test_an_artifact_keeps_its_ranges(linear_norm, tmp_path):
    model, compiled = linear_norm
    compiled.save(tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["dynamic"] == [{"input": 0, "dim": 0, "name": "batch", "low": 1, "high": 64, "multiple": 1},
                                   {"input": 0, "dim": 1, "name": "seq", "low": 1, "high": 512, "multiple": 1}]
    loaded = twintrack.load(tmp_path / "a")
    x = torch.randn(5, 33, 32)
    torch.testing.assert_close(loaded(x), compiled(x))
    with pytest.raises(InputMismatchError, match="seq"):
        loaded(torch.randn(5, 513, 32))


def test_the_cli_compiles_and_runs_at_the_sizes_asked(run_tool, tmp_path):
    compiled = run_tool("compile", "zoo:mlp", "--dynamic", "x:0=rows[1,256]", "-o", tmp_path / "a", "-q")
    assert compiled.returncode == 0, compiled.stderr
    ran = run_tool("run", tmp_path / "a", "--check", "--sizes", "rows=131")
    assert ran.returncode == 0, ran.stderr
    assert "rows=131" in ran.stderr and "check: passed" in ran.stdout
    refused = run_tool("run", tmp_path / "a", "--sizes", "rows=257")
    assert refused.returncode == 2 and "rows is 257; compiled for rows in [1, 256]" in refused.stderr
    bad = run_tool("compile", "zoo:mlp", "--dynamic", "x:0=rows[1,256", "-o", tmp_path / "b", "-q")
    assert bad.returncode == 2 and "--dynamic: cannot read" in bad.stderr and not (tmp_path / "b").exists()


def test_the_benchmark_compares_one_dynamic_compile_with_static_ones(run_tool, tmp_path):
    result = run_tool("bench_dynamic", "zoo:mlp", "--dynamic", "x:0=rows[1,64]", "--sizes", "rows=1;rows=33",
                      "--no-inductor", "--repeat", "1", "--tag", "mlp", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(next(tmp_path.glob("*-cpu-dynamic-mlp.json")).read_text())
    assert [row["sizes"] for row in report["shapes"]] == [{"rows": 1}, {"rows": 33}]
    assert all(row["ok"] and row["dynamic/static"] > 0 for row in report["shapes"])
    assert "| rows=33 |" in result.stdout and report["geomean"]["dynamic/static"] > 0


def test_wide_ranges_keep_the_workspace_within_its_cap():
    """Temporaries are planned at their largest sizes; the JIT zero-fills
    the workspace when it loads, so those past the cap keep malloc instead
    of the process holding gigabytes for sizes it may never see."""
    from twintrack.compiler.passes.plan_workspace import MAX_WORKSPACE_BYTES
    model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 8)).eval()
    lowered = twintrack.export(model, (torch.randn(4, 64),), dynamic="0:0=rows[1,65536]").lower(to="memory")
    planned = re.search(r"twintrack.workspace_bytes = (\d+)", lowered.as_text())
    assert planned is None or int(planned[1]) <= MAX_WORKSPACE_BYTES
    assert "memref.alloc(" in lowered.as_text()  # the 1 GiB hidden activations: malloc'd at their call's size


def test_the_spec_syntax():
    x = torch.randn(4, 8, 32)
    dims = parse_dynamic("x:0=batch[1,64], 0:-2=seq[8,2048]%8", ["x"], (x,))
    assert dims == [DynamicDim(0, 0, "batch", 1, 64), DynamicDim(0, 1, "seq", 8, 2048, 8)]


@pytest.mark.parametrize("spec, message", [
    ("x:0=batch(1,64)", "cannot read 'x:0=batch(1,64)'"),
    ("y:0=batch[1,64]", "no input named 'y' (inputs: x)"),
    ("1:0=batch[1,64]", "input 1 does not exist"),
    ("x:3=batch[1,64]", "has 3 dims; there is no dim 3"),
    ("x:0=batch[8,64]", "dim 0 of the example is 4; compiled for batch in [8, 64]"),
    ("x:1=seq[1,64]%3", "is 8; compiled for seq in [1, 64], a multiple of 3"),
    ("x:0=n[1,64],x:1=n[1,32]", "n is given two ranges"),
])
def test_bad_specs_are_named(spec, message):
    with pytest.raises(UsageError) as error:
        parse_dynamic(spec, ["x"], (torch.randn(4, 8, 32),))
    assert message in str(error.value)


class Specializes(torch.nn.Module):
    def forward(self, x):
        return x + torch.ones(4, 8)


class AddsTwo(torch.nn.Module):
    def forward(self, x, y):
        return x + y


@pytest.mark.parametrize("model, inputs, spec, message", [
    (Specializes(), (torch.randn(4, 8),), "x:0=b[1,64]", "specialized it to be a constant (4)"),
    (AddsTwo(), (torch.randn(4, 8), torch.randn(4, 8)), "x:0=a[1,64],y:0=b[1,64]", "suggested fixes: b = a"),
])
def test_a_spec_the_model_contradicts_shows_the_fix(model, inputs, spec, message):
    with pytest.raises(UsageError) as error:
        twintrack.export(model, inputs, dynamic=spec)
    assert "--dynamic disagrees with the model" in str(error.value) and message in str(error.value)
    assert "L['flat" not in str(error.value)  # the model's inputs named as such


def test_the_bert_range_past_its_position_table_is_refused():
    model, (ids,) = real_models.bert(positions=64)
    with pytest.raises(UsageError, match=r"seq = Dim\('seq', max=64\)"):
        twintrack.export(model, (ids,), dynamic="ids:1=seq[1,512]")


class Sorted(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values


def test_a_size_a_decomposition_fixes_is_refused_at_compile_time():
    """The sort's network has as many stages as its length needs: n becomes
    a constant while the frontend decomposes, which must be an error naming
    the dim, not an artifact compiled static in silence."""
    with pytest.raises(UsageError, match=r"n \(input 0 dim 1\) became the constant 8 as twintrack decomposed"):
        twintrack.compile(Sorted(), (torch.randn(3, 8),), dynamic="x:1=n[2,16]")


class Scans(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(-x, dim=0), torch.cumprod(x, dim=1)


def test_scans_along_run_time_lengths_take_steps_for_the_longest():
    """The log-step scans take as many steps as the range's longest length
    needs (the fuzzer's cpu-dynamic campaign found a cumsum compiled with
    the example's two steps, wrong past 4, and a cumprod fixed at its length)."""
    model = Scans()
    compiled = twintrack.compile(model, (torch.randn(4, 2),), dynamic="x:0=n[2,11],x:1=m[2,9]")
    for n, m in ((2, 2), (4, 3), (11, 9), (7, 5)):
        x = torch.randn(n, m)
        for ours, eager in zip(compiled(x), model(x)):
            torch.testing.assert_close(ours, eager)


class IntegerPower(torch.nn.Module):
    def forward(self, exponent, base):
        return torch.pow(base, torch.clamp(exponent, min=-1, max=1))


def test_an_integer_power_of_run_time_length():
    """The integer pow's square-and-multiply loop carries buffers of run-time
    length: their ops run as plain loops (nested-linalg-loops; the affine
    stage failed on them, found by the cpu-dynamic fuzz campaign)."""
    model = IntegerPower()
    compiled = twintrack.compile(model, (torch.randint(-6, 7, (4,)), torch.randint(0, 2, (4,)).bool()),
                                 dynamic="exponent:0=n[2,11],base:0=n[2,11]")
    for n in (2, 5, 11):
        exponent, base = torch.randint(-6, 7, (n,)), torch.randint(0, 2, (n,)).bool()
        torch.testing.assert_close(compiled(exponent, base), model(exponent, base))


def test_view_groups_pair_equal_products():
    b, s = sympy.symbols("b s", integer=True, positive=True)
    assert dim_groups([b, s, 32], [b * s, 32]) == [([0, 1], [0]), ([2], [1])]
    assert dim_groups([b * s, 64], [b, s, 4, 16]) == [([0], [0, 1]), ([1], [2, 3])]
    assert dim_groups([b, 1, s], [b, s]) == [([0], [0]), ([1, 2], [1])]
    assert dim_groups([b, s, 1], [b, s]) == [([0], [0]), ([1, 2], [1])]
    assert dim_groups([b, 6], [3 * b, 2]) == [([0, 1], [0, 1])]  # no finer pairing: all of it at once
    assert dim_groups([b, s], [s, b]) == [([0, 1], [0, 1])]
    assert dim_groups([], [1]) is None


def test_shape_expressions_evaluate_integer_arithmetic_only():
    assert concrete_shape(("batch", "seq // 8", 4, "1 + ((seq - 3) // 2)"), {"batch": 2, "seq": 16}) == (2, 2, 4, 7)
    from twintrack.errors import ArtifactError
    with pytest.raises(ArtifactError, match="uses"):
        concrete_shape(("__import__('os')",), {"seq": 1})


class SliceThenUnflatten(torch.nn.Module):
    """A (b·s, 384) slice of 128 columns seen as (b, s, 128): an expansion of
    a strided view into two run-time sizes (upstream's lowering aborted the
    process on it)."""
    def forward(self, x):
        b, s, d = x.shape
        return (torch.tanh(x.reshape(b * s, d))[:, :128].reshape(b, s, 128)) * 2


def test_a_slice_split_into_run_time_sizes():
    model = SliceThenUnflatten()
    compiled = twintrack.compile(model, (torch.randn(2, 8, 384),), dynamic="x:0=b[1,64],x:1=s[1,512]")
    for b, s in [(1, 1), (3, 7), (64, 13)]:
        x = torch.randn(b, s, 384)
        torch.testing.assert_close(compiled(x), model(x))
