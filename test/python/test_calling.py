"""The calling convention (outputs in the module's structure, aliasing,
input and buffer mutations, scalar inputs), run-time guards, and artifacts
refused when their manifest is edited."""

import json
import shutil

import pytest
import torch

import twintrack
from twintrack.errors import ArtifactError, IndexOutOfRange, InputMismatchError, ProgramCheckFailed


def _module(fn):
    class Fn(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)
    return Fn()


def test_outputs_keep_the_module_structure_and_aliasing():
    def fn(x):
        y = x * 3
        return {"a": y, "b": [None, x, y]}, 7, "tag"
    x = torch.randn(4)
    out = twintrack.compile(_module(fn), (x,))(x)
    expected = fn(x.double())
    assert out[1:] == (7, "tag") and out[0]["b"][0] is None
    assert out[0]["b"][1] is x                       # an input returned is the input itself
    assert out[0]["a"] is out[0]["b"][2]             # one tensor returned twice is one tensor
    torch.testing.assert_close(out[0]["a"].double(), expected[0]["a"])


@pytest.mark.parametrize("fn", [
    lambda x: (x + 1, x + 1),                        # CSE makes these one value
    lambda x: (x.amax(-1), torch.max(x, -1)[0]),
    lambda x: (x * 2, x, x * 2),
])
def test_equal_outputs_are_separate_results(fn):
    x = torch.randn(3, 5)
    out = twintrack.compile(_module(fn), (x,))(x)
    for got, want in zip(out, fn(x.double()), strict=True):
        torch.testing.assert_close(got.double(), want)


@pytest.mark.parametrize("name, fn", [
    ("copy_", lambda x, y: x.copy_(y)),
    ("fill_", lambda x, y: x.fill_(2.5)),
    ("zero_", lambda x, y: x.zero_()),
    ("slice copy_", lambda x, y: x[1:3].copy_(y[:2])),
    ("add_ then use", lambda x, y: x.add_(y) * 2),
])
def test_input_mutations_reach_the_caller(name, fn):
    x, y = torch.randn(4), torch.randn(4)
    compiled = twintrack.compile(_module(fn), (x.clone(), y))
    mine, theirs = x.clone(), x.clone()
    got, want = compiled(mine, y), fn(theirs, y)
    assert isinstance(got, torch.Tensor), name      # a tensor, as eager returns, not a tuple with the update
    torch.testing.assert_close(mine, theirs)
    torch.testing.assert_close(got, want)
    if want.data_ptr() == theirs.data_ptr():        # eager returned the updated input itself
        assert got is mine


def test_train_mode_batch_norm_updates_its_buffers():
    torch.manual_seed(0)
    ours, eager = torch.nn.BatchNorm1d(6).train(), torch.nn.BatchNorm1d(6).train()
    x = torch.randn(16, 6)
    compiled = twintrack.compile(ours, (x,))
    assert ours.training                            # compile leaves the module's mode as it was
    torch.testing.assert_close(compiled(x), eager(x), atol=1e-5, rtol=1e-5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(ours, name), getattr(eager, name))


@pytest.mark.parametrize("x", [torch.tensor(2.5), torch.tensor([-3]), torch.tensor(True)], ids=["float", "int", "bool"])
def test_item_outputs_come_back_as_python_numbers(x):
    """`.item()` returned: the tensor is computed, and read after the call."""
    def fn(x):
        return (x * 2).item(), x.item()
    compiled = twintrack.compile(_module(fn), (x,))
    fresh = x + 1 if x.dtype != torch.bool else ~x
    got, expected = compiled(fresh), fn(fresh)
    assert got == expected and [type(v) for v in got] == [type(v) for v in expected]


def test_item_outputs_flatten_as_tensors_beside_their_specs(tmp_path):
    """The checkers' flat view: one 0-d tensor per `.item()`, one spec each."""
    x = torch.tensor([1.5, -2.0])
    twintrack.compile(_module(lambda x: (x.sum().item(), x * 2)), (x,)).save(tmp_path / "item")
    loaded = twintrack.load(tmp_path / "item")
    flat = loaded.flat(x)
    assert len(flat) == 2 and torch.equal(flat[0], torch.tensor(-0.5)) and torch.equal(flat[1], x * 2)


def test_python_scalar_inputs_are_compiled_in():
    def fn(x, n, scale, flag):
        return x * n + scale if flag else x
    x = torch.randn(3)
    compiled = twintrack.compile(_module(fn), (x, 3, 0.5, True))
    torch.testing.assert_close(compiled(x, 3, 0.5, True), fn(x, 3, 0.5, True))
    with pytest.raises(InputMismatchError, match="compiled as the constant 3"):
        compiled(x, 4, 0.5, True)


def test_integer_division_by_zero_raises_and_int_min_wraps():
    def fn(a, b):
        return torch.div(a, b, rounding_mode="trunc"), a // b, torch.fmod(a, b), torch.remainder(a, b)
    a = torch.tensor([7, -7, -2**63, 9])
    compiled = twintrack.compile(_module(fn), (a, torch.tensor([2, 3, -1, -1])))
    got = compiled(a, torch.tensor([2, -3, -1, -1]))
    assert got[0].tolist() == [3, 2, -2**63, -9] and got[1].tolist() == [3, 2, -2**63, -9]
    assert got[2].tolist() == [1, -1, 0, 0] and got[3].tolist() == [1, -1, 0, 0]
    with pytest.raises(ProgramCheckFailed, match=r"aten\.div at test_calling\.py:\d+: integer division by zero"):
        compiled(a, torch.tensor([2, 0, 1, 1]))


class _Lookups(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(5, 3)

    def forward(self, index, x):
        return self.table(index), x.index_select(0, index), x.gather(0, index[:, None].expand(-1, 3)), x[index]


@pytest.mark.parametrize("bad", [[1, 5], [-1, 0], [2, 1000]])
def test_indices_out_of_range_raise_index_error(bad):
    model, x = _Lookups().eval(), torch.randn(5, 3)
    compiled = twintrack.compile(model, (torch.tensor([0, 4]), x))
    for got, want in zip(compiled(torch.tensor([3, 4]), x), model(torch.tensor([3, 4]), x), strict=True):
        assert torch.equal(got, want)
    with pytest.raises(IndexOutOfRange, match=r"aten\.embedding at test_calling\.py:\d+: index out of range"):
        compiled(torch.tensor(bad), x)
    with pytest.raises(IndexError):
        model(torch.tensor(bad), x)


@pytest.fixture(scope="module")
def cpu_artifact(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("artifact") / "mutating"
    x = torch.randn(4)
    twintrack.export(_module(lambda x, y: (x.add_(y), {"sum": x.sum()})), (x, x.clone())).lower(to=None).save(outdir)
    return outdir


def test_a_loaded_artifact_returns_the_structure_and_mutates(cpu_artifact):
    run = twintrack.load(cpu_artifact)
    x, y = torch.randn(4), torch.randn(4)
    expected = x + y
    out = run(x, y)
    assert out[0] is x and set(out[1]) == {"sum"}
    torch.testing.assert_close(x, expected)
    torch.testing.assert_close(out[1]["sum"], expected.sum())


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["arguments"].append(dict(m["arguments"][0], name="extra")), "not what the executable takes"),
    (lambda m: m["arguments"][0].update(dtype="float64"), "not what the executable takes"),
    (lambda m: m["arguments"][0].update(shape=[4, -1]), "bad shape"),
    (lambda m: m["outputs"][0].update(dtype="complex64"), "unsupported dtype"),
    (lambda m: m["arguments"][0].update(storage_order=[0, 3]), "storage order"),
    (lambda m: m["calling"]["leaves"].append({"kind": "result", "index": 9}), "outside the"),
    (lambda m: m.pop("manifest_version"), "manifest version"),
])
def test_an_edited_manifest_is_refused(cpu_artifact, tmp_path, edit, message):
    copy = tmp_path / "edited"
    shutil.copytree(cpu_artifact, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=message):
        twintrack.load(copy)


def test_a_damaged_executable_is_refused(cpu_artifact, tmp_path):
    copy = tmp_path / "damaged"
    shutil.copytree(cpu_artifact, copy)
    text = (copy / "executable.mlir").read_text()
    (copy / "executable.mlir").write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match="not valid MLIR"):
        twintrack.load(copy)


def test_a_buffer_larger_than_memory_is_refused_before_the_run():
    from twintrack.compiler.cpu_jit import check_memory
    from twintrack.errors import OutOfMemory

    def fn(x):
        return torch.softmax(x @ x.t(), -1).sum(0)
    x = torch.randn(64, 8)
    compiled = twintrack.compile(_module(fn), (x,))
    assert compiled._executable._largest_buffer >= 64 * 64 * 4   # the score matrix, at least
    torch.testing.assert_close(compiled(x).double(), fn(x.double()), rtol=1e-5, atol=1e-5)
    with pytest.raises(OutOfMemory, match="needs a buffer of 160.0 GiB"):
        check_memory(160 * 2**30)


def test_compiled_save_carries_the_state(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    twintrack.compile(model, (x,)).save(tmp_path / "mlp")
    run = twintrack.load(tmp_path / "mlp")
    torch.testing.assert_close(run(x), model(x))                     # the inputs alone
    state = [p.detach() for p in model.parameters()]
    torch.testing.assert_close(run(*state, x), model(x))             # or the state given


def test_exporting_warns_the_user_of_nothing_torch_deprecates():
    """The frontend's own handling of the export (its calling convention
    rewrites the program's output spec) triggers none of torch's FutureWarnings."""
    import warnings
    x = torch.randn(4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FutureWarning)
        twintrack.export(_module(lambda x: (x.relu() + 1, x * 2)), (x,))
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []


def test_bool_and_uint8_constants_of_the_module_as_eager():
    """Tensors the module holds (not parameters or buffers: export lifts them
    as constants, and torch-mlir's importer stores them as resource blobs)."""
    class Constants(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flags = torch.tensor([True, False, True, False])
            self.bytes = torch.tensor([3, 250, 7, 0], dtype=torch.uint8)

        def forward(self, x):
            return self.flags, self.bytes + x

    x = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    flags, total = twintrack.compile(Constants(), (x,))(x)
    assert torch.equal(flags, Constants().flags) and torch.equal(total, Constants()(x)[1])


NUMBERS = {  # Python arithmetic on `.item()` reads, returned
    "int_sum": (lambda a, b: int(a) + int(b) * 3 - 1, (torch.tensor(3), torch.tensor(-4))),
    "int_true_division": (lambda a, b: int(a) / int(b), (torch.tensor(7), torch.tensor(2))),
    "double_product": (lambda a, b: float(a) * float(b), (torch.tensor(3.5, dtype=torch.float64),
                                                          torch.tensor(2.25, dtype=torch.float64))),
    "float32_read_then_double_arithmetic": (lambda a: float(a) + 0.1, (torch.tensor(1.1),)),
    "comparison": (lambda a, b: float(a) >= float(b), (torch.tensor(3.5), torch.tensor(2.0))),
    "float_plus_int": (lambda a, b: float(a) + int(b), (torch.tensor(1.5, dtype=torch.float64), torch.tensor(2))),
}


@pytest.mark.parametrize("name", list(NUMBERS))
def test_numbers_computed_from_item_reads_come_back_as_eager(name):
    fn, inputs = NUMBERS[name]
    result, expected = twintrack.compile(_module(fn), inputs)(*inputs), fn(*inputs)
    assert type(result) is type(expected) and result == expected
