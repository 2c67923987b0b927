"""torch.compile(model, backend="twintrack") on the CPU: the registered
backend, inference through Dynamo and AOTAutograd (zoo and Hugging Face
models), a program cut by graph breaks, training steps against eager
(gradients through attention, batch norm's buffers), a graph twintrack
refuses (it runs eagerly, with a warning naming its source line), and the
options' errors and dumps."""

import copy
import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

from twintrack import cache_misses, dynamo_backend
from twintrack.harness import zoo

sys.path.insert(0, str(Path(__file__).parent))
import real_models  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles its own graphs and counts them alone."""
    torch._dynamo.reset()
    dynamo_backend.reset_stats()
    yield
    torch._dynamo.reset()


def _float64_reference(model, inputs):
    reference = copy.deepcopy(model).double()
    with torch.no_grad():
        return reference(*(x.double() if x.is_floating_point() else x for x in inputs))


def test_backend_is_registered():
    assert "twintrack" in torch._dynamo.list_backends()


@pytest.mark.parametrize("spec", [
    "mlp?batch=8&features=16&hidden=32&out=8",
    "conv_block?batch=2&in_channels=3&channels=8&size=16",
    "transformer_block?batch=2&seq=16&dim=32&heads=4",
    "gpt_block?batch=2&seq=16&dim=32&heads=4",
])
def test_inference_matches_float64(spec):
    model, inputs = zoo.build(spec)
    with torch.no_grad():
        result = torch.compile(model, backend="twintrack")(*inputs)
    torch.testing.assert_close(result.double(), _float64_reference(model, inputs), rtol=1e-4, atol=1e-5)
    stats = dynamo_backend.stats()
    assert stats.compiled == 1 and not stats.fallbacks, stats


@pytest.mark.parametrize("name", [
    "bert",
    "whisper_encoder",  # a view of attention's transposed result: retraced, its strides differ (a reshape then)
    "mobilenet_v3",
])
def test_hugging_face_and_cnn_inference(name):
    model, inputs = getattr(real_models, name)()
    with torch.no_grad():
        result = torch.compile(model, backend="twintrack")(*inputs)
    torch.testing.assert_close(result.double(), _float64_reference(model, inputs), rtol=1e-4, atol=1e-5)
    assert dynamo_backend.stats().compiled == 1 and not dynamo_backend.stats().fallbacks


class Breaks(torch.nn.Module):
    """A print and a branch on the data: Dynamo cuts the program in three graphs."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.relu(self.first(x))
        print("between the graphs")
        if y.sum() > 0:
            y = y * 2
        return self.second(y)


def test_graph_breaks_run_in_pieces(capsys):
    model, x = Breaks(), torch.randn(3, 8)
    with torch.no_grad():
        result = torch.compile(model, backend="twintrack")(x)
        expected = model(x)
    torch.testing.assert_close(result, expected)
    assert "between the graphs" in capsys.readouterr().out
    assert dynamo_backend.stats().compiled == 3 and not dynamo_backend.stats().fallbacks


class SmallCnn(torch.nn.Module):
    """Convolutions without bias before batch norm (as ResNet's), in train mode: the running statistics change."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.norm = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x)))
        return self.head(y.mean(dim=(2, 3)))


@pytest.mark.parametrize("name", ["transformer_block", "cnn_batch_norm"])
def test_training_steps_match_eager(name):
    """AdamW steps (the optimizer in eager) on the compiled forward and
    backward graphs: each loss within 1e-4 of eager's, the parameters and
    buffers within 1e-3 after the steps. Attention's gradients come through
    its math (a fused kernel's saved log-sum-exp would not be computed)."""
    torch.manual_seed(0)
    if name == "cnn_batch_norm":
        model, batch = SmallCnn().train(), (4, 3, 8, 8)
    else:
        model, inputs = zoo.build("transformer_block?batch=2&seq=16&dim=32&heads=4")
        batch = tuple(inputs[0].shape)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="twintrack")
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, reference)]
    for _ in range(3):
        x = torch.randn(batch)
        losses = [f(x).square().mean() for f in (compiled, reference)]
        for optimizer, loss in zip(optimizers, losses):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        assert abs(losses[0].item() - losses[1].item()) <= 1e-4 * abs(losses[1].item())
    for ours, theirs in zip([*model.parameters(), *model.buffers()], [*reference.parameters(), *reference.buffers()]):
        torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-3)
    stats = dynamo_backend.stats()
    assert stats.compiled == 2 and not stats.fallbacks, stats  # the forward and backward graphs


class Eigenvalues(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.eigvals(x).abs() + 1


def test_refused_graph_runs_eagerly_with_a_warning():
    x = torch.randn(4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = torch.compile(Eigenvalues(), backend="twintrack")(x)
    torch.testing.assert_close(result, Eigenvalues()(x))
    messages = [str(w.message) for w in caught if str(w.message).startswith("twintrack:")]
    assert len(messages) == 1 and "complex dtypes are not supported" in messages[0]
    assert "test_dynamo_backend.py:" in messages[0], messages  # the model's own line, not the graph's code
    assert dynamo_backend.stats().compiled == 0 and len(dynamo_backend.stats().fallbacks) == 1


def test_no_fallback_makes_it_an_error():
    with pytest.raises(Exception, match="complex dtypes are not supported"):
        torch.compile(Eigenvalues(), backend="twintrack", options={"fallback": False})(torch.randn(4, 4))


@pytest.mark.parametrize("options, fragment", [
    ({"bogus": 1}, "unknown option(s) bogus"),
    ({"fusion": "yes"}, "option fusion='yes' is not a bool"),
    ({"target": "tpu"}, "target='tpu': 'cpu' or 'gpu'"),
])
def test_bad_options_are_named(options, fragment):
    with pytest.raises(Exception, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        torch.compile(torch.nn.Linear(4, 4), backend="twintrack", options=options)(torch.randn(2, 4))


def test_dump_writes_each_graphs_artifact(tmp_path):
    model, inputs = zoo.build("mlp?batch=8&features=16&hidden=32&out=8")
    with torch.no_grad():
        torch.compile(model, backend="twintrack", options={"dump": str(tmp_path), "fusion": False})(*inputs)
    (graph,) = tmp_path.iterdir()
    assert graph.name.startswith("inference_")
    manifest = json.loads((graph / "manifest.json").read_text())
    assert manifest["pipeline"] == "cpu" and any((graph / "stages").glob("*-linalg.mlir"))


# ---------------------------------------------------------------- the compile cache

@pytest.fixture
def graph_cache(tmp_path, monkeypatch):
    """The compile cache on, in a directory of this test's own."""
    monkeypatch.setenv("TWINTRACK_CACHE", "1")
    monkeypatch.setenv("TWINTRACK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "graphs"


MLP = "mlp?batch=8&features=16&hidden=32&out=8"


def _run_mlp(options: dict | None = None):
    torch._dynamo.reset()
    model, inputs = zoo.build(MLP)
    with torch.no_grad():
        return torch.compile(model, backend="twintrack", options=options)(*inputs), model(*inputs)


class WithConstant(torch.nn.Module):
    """A tensor made in forward: a constant of the captured graph, which travels in the cached artifact."""

    def forward(self, x):
        return torch.relu(x) * torch.tensor([1.0, 2.0, 3.0, 4.0])


def _run_with_constant():
    torch._dynamo.reset()
    x = torch.randn(3, 4)
    return torch.compile(WithConstant(), backend="twintrack")(x), WithConstant()(x)


@pytest.mark.parametrize("run", [_run_mlp, _run_with_constant], ids=["mlp", "constant"])
def test_a_second_run_loads_every_graph_from_the_cache(graph_cache, run):
    run()
    assert dynamo_backend.stats().compiled == 1 and len(list(graph_cache.iterdir())) == 1
    dynamo_backend.reset_stats()
    result, expected = run()
    stats = dynamo_backend.stats()
    assert (stats.compiled, stats.cache_hits) == (0, 1), stats
    torch.testing.assert_close(result, expected)


def test_a_miss_where_nothing_compiles_names_the_graph_and_its_key(graph_cache):
    with pytest.raises(Exception, match=r"graph inference_\d+ \(\d+ nodes\) is not in the compile cache .* under "
                                        r"key [0-9a-f]{32}, and is not compiled here"):
        _run_mlp({"on_miss": "error"})


def test_a_miss_keeps_the_graphs_code_to_diff_against_the_entries(graph_cache):
    """Where a machine without MLIR misses (its capture differs from the
    compiling machine's), the code it looked up is kept beside the entries,
    each of which holds the code its key was computed from."""
    with pytest.raises(Exception, match=r"its code: .*misses/[0-9a-f]{32}/graph\.py"):
        _run_mlp({"on_miss": "error"})
    (missed,) = (graph_cache.parent / "misses").iterdir()
    _run_mlp()  # compiled here, stored under the key that missed
    (entry,) = graph_cache.iterdir()
    assert missed.name == entry.name and "def forward" in (missed / "graph.py").read_text()
    assert (missed / "graph.py").read_text() == (entry / "graph.py").read_text()


def test_recorded_misses_compile_here_and_then_hit(graph_cache):
    """A miss carries its graph: compiled here under the key the other
    machine looked up, that machine's next run compiles nothing."""
    with pytest.raises(Exception, match="is not in the compile cache"):
        _run_mlp({"on_miss": "error"})
    (outcome,) = cache_misses.compile_misses(progress=lambda message: None)
    assert outcome.error is None and "inference graph" in outcome.description, outcome
    assert not list((graph_cache.parent / "misses").iterdir())
    assert [entry.name for entry in graph_cache.iterdir()] == [outcome.key]
    dynamo_backend.reset_stats()
    result, expected = _run_mlp({"on_miss": "error"})
    stats = dynamo_backend.stats()
    assert (stats.compiled, stats.cache_hits) == (0, 1), stats
    torch.testing.assert_close(result, expected)


def test_a_miss_without_its_graph_stays_with_the_reason(graph_cache):
    with pytest.raises(Exception, match="is not in the compile cache"):
        _run_mlp({"on_miss": "error"})
    (missed,) = (graph_cache.parent / "misses").iterdir()
    (missed / "graph.pt").unlink()
    (outcome,) = cache_misses.compile_misses(progress=lambda message: None)
    assert "graph.pt is absent" in outcome.error and missed.is_dir()


def test_a_miss_whose_graph_does_not_load_stays_with_the_reason(graph_cache):
    with pytest.raises(Exception, match="is not in the compile cache"):
        _run_mlp({"on_miss": "error"})
    (missed,) = (graph_cache.parent / "misses").iterdir()
    (missed / "graph.pt").write_bytes(b"not a pickle")
    (outcome,) = cache_misses.compile_misses(progress=lambda message: None)
    assert "graph.pt does not load here" in outcome.error and missed.is_dir()


def test_another_machines_devices_become_this_ones():
    """A graph captured on the GPU makes its tensors on CUDA; here it is
    traced on the CPU (the key leaves devices out)."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    ones = graph.call_function(torch.ops.aten.ones.default, ([4],), {"device": torch.device("cuda", 0)})
    graph.output((graph.call_function(torch.ops.aten.add.Tensor, (x, ones)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    cache_misses.on_this_machine(gm)
    assert "cuda" not in gm.code
    (result,) = gm(torch.zeros(4))
    torch.testing.assert_close(result, torch.ones(4))


def test_a_miss_recorded_on_the_gpu_loads_here(graph_cache):
    """Unpickling a graph re-traces its code: a CUDA factory op (a causal
    mask's ones) failed on this machine, without CUDA. The record keeps its
    devices as this machine's (the key leaves them out), and compiles here."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    ones = graph.call_function(torch.ops.aten.ones.default, ([4],), {"device": torch.device("cuda", 0)})
    graph.output((graph.call_function(torch.ops.aten.add.Tensor, (x, ones)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    cache_misses.record("0" * 32, gm, [torch.zeros(4)], dynamo_backend.BackendOptions(), "cpu", "inference")
    assert "cuda" in gm.code  # the caller's graph is left as it was
    (outcome,) = cache_misses.compile_misses(progress=lambda message: None)
    assert outcome.error is None, outcome.error
    assert [entry.name for entry in graph_cache.iterdir()] == ["0" * 32]


def test_a_miss_can_go_to_inductor(graph_cache):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, expected = _run_mlp({"on_miss": "inductor"})
    torch.testing.assert_close(result, expected)
    assert dynamo_backend.stats().inductor == 1 and dynamo_backend.stats().compiled == 0
    assert any("Inductor compiles it" in str(w.message) for w in caught)


def test_compile_only_fills_the_cache_for_the_gpu(graph_cache):
    """Here, without a GPU: each graph is compiled for the GPU and stored,
    and the program runs eagerly; a GPU machine with a copy of the cache
    (the same key: devices are not part of it) loads the graph there."""
    options = {"target": "gpu", "compile_only": True}
    result, expected = _run_mlp(options)
    torch.testing.assert_close(result, expected)
    (graph,) = graph_cache.iterdir()
    manifest = json.loads((graph / "manifest.json").read_text())
    assert manifest["pipeline"] == "gpu" and manifest["kernels"] and all((graph / k["cubin"]).is_file()
                                                                          for k in manifest["kernels"])
    dynamo_backend.reset_stats()
    _run_mlp({**options, "on_miss": "error"})  # found under the same key
    assert dynamo_backend.stats().cache_hits == 1


def test_the_key_leaves_devices_out():
    def on(device):  # x + ones(4) made on `device`, as AOTAutograd writes it (built, not run: no GPU here)
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        ones = graph.call_function(torch.ops.aten.ones.default, ([4],), {"device": torch.device(device)})
        graph.output((graph.call_function(torch.ops.aten.add.Tensor, (x, ones)),))
        return torch.fx.GraphModule(torch.nn.Module(), graph)
    x = torch.randn(2, 4)
    keys = {dynamo_backend.graph_key(on(device), [x], "settings") for device in ("cpu", "cuda", "cuda:1")}
    assert len(keys) == 1
    assert dynamo_backend.graph_key(on("cpu"), [x], "other settings") not in keys
    assert dynamo_backend.graph_key(on("cpu"), [torch.randn(3, 4)], "settings") not in keys


class GridSample3d(torch.nn.Module):
    def forward(self, volume, grid):
        return torch.nn.functional.grid_sample(volume, grid, align_corners=False) * 2


def test_a_stage_failure_leaves_its_reproducer_in_the_dump(tmp_path):
    volume, grid = torch.randn(1, 2, 4, 4, 4), torch.rand(1, 3, 3, 3, 3) * 2 - 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = torch.compile(GridSample3d(), backend="twintrack", options={"dump": str(tmp_path)})(volume, grid)
    torch.testing.assert_close(result, GridSample3d()(volume, grid))  # it ran eagerly
    (message,) = [str(w.message) for w in caught if str(w.message).startswith("twintrack:")]
    assert "stage 'torch' failed" in message and "grid_sampler_3d" in message and "reproducer in" in message
    (repro,) = tmp_path.glob("*/repro")
    assert (repro / "command.sh").is_file() and (repro / "error.txt").is_file()


def test_inputs_that_require_grad_give_the_same_forward(capsys):
    """The forward of a training graph (saved activations among its outputs) against the inference graph's."""
    model, inputs = zoo.build("transformer_block?batch=2&seq=16&dim=32&heads=4")
    x = inputs[0]
    with torch.no_grad():
        inference = torch.compile(model, backend="twintrack")(x)
    torch._dynamo.reset()
    training = torch.compile(model, backend="twintrack")(x.clone().requires_grad_(True))
    assert training.requires_grad
    torch.testing.assert_close(training.detach(), inference)


# ---------------------------------------------------------------- sizes that vary

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_a_graph_with_symbolic_sizes_is_compiled_once_for_a_bucket_of_sizes():
    """After a size changes Dynamo hands over a graph with symbolic sizes;
    twintrack compiles it once, with dynamic shapes, for every size of the
    bucket, forward and backward."""
    model = _mlp()
    compiled = torch.compile(model, backend="twintrack")
    for batch in (2, 3, 5, 3):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    stats = dynamo_backend.stats()
    assert (stats.compiled, stats.fallbacks, stats.recompiles) == (2, [], []), stats  # 2 (static), then the bucket
    for batch in (3, 6):
        x = torch.randn(batch, 8)
        compiled(x).square().sum().backward()
        ours = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().sum().backward()
        for mine, theirs in zip(ours, model.parameters()):
            torch.testing.assert_close(mine, theirs.grad)
        model.zero_grad()
    assert not dynamo_backend.stats().fallbacks


def test_a_graph_with_a_convolution_compiles_each_size_on_its_fast_path():
    """The convolutions' fast paths take static sizes: a graph with one
    compiles each batch size apart (a static compile each), not one bucket
    of generic loops; a size seen before is served by its compile."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="twintrack", dynamic=True)
    for batch in (2, 3, 2):
        x = torch.randn(batch, 3, 8, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    stats = dynamo_backend.stats()
    assert (stats.compiled, stats.fallbacks) == (2, []), stats
    (recompile,) = stats.recompiles
    assert "= 3 in [3, 3]" in recompile and "convolutions compiles each size" in recompile


def test_dynamic_true_compiles_once_for_inference_and_for_training():
    model = _mlp()
    compiled = torch.compile(model, backend="twintrack", dynamic=True)
    for batch in (3, 5, 9):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x).double(), _float64_reference(model, (x,)), rtol=1e-5, atol=1e-6)
    assert (dynamo_backend.stats().compiled, dynamo_backend.stats().fallbacks) == (1, [])
    dynamo_backend.reset_stats()
    reference = copy.deepcopy(model)
    for batch in (4, 6, 11):  # the forward graph returns symbolic sizes for the backward: computed from the inputs
        x = torch.randn(batch, 8)
        compiled(x).square().mean().backward()
        reference(x).square().mean().backward()
        for mine, theirs in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-5, atol=1e-7)
    stats = dynamo_backend.stats()
    assert (stats.compiled, stats.fallbacks) == (2, []), stats  # the forward and the backward, once each


@pytest.mark.skipif(not __import__("twintrack.tooling", fromlist=["find_tool"]).find_tool("ptxas"),
                    reason="needs ptxas (the CUDA toolkit)")
def test_a_gpu_graph_with_symbolic_sizes_compiles_one_bucket(tmp_path):
    """For the GPU too, symbolic sizes compile once for a bucket: its
    artifact's plan reads the batch off the input."""
    model = _mlp()
    compiled = torch.compile(model, backend="twintrack", dynamic=True,
                             options={"target": "gpu", "compile_only": True, "dump": str(tmp_path)})
    with torch.no_grad():
        for batch in (2, 7):  # compile_only: the graph runs as captured here
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
    stats = dynamo_backend.stats()
    assert (stats.compiled, stats.fallbacks, stats.recompiles) == (1, [], []), stats
    (graph,) = tmp_path.iterdir()
    plan = json.loads((graph / "plan.json").read_text())
    assert plan["version"] == 2 and len(plan["symbols"]) == 1, plan.get("symbols")


class PositionEmbedded(torch.nn.Module):
    """Token and position embeddings, as BERT's: the positions are a slice of
    a buffer of 64, so the sequence can be no longer (a symbol's bound)."""

    def __init__(self):
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(128, 16), torch.nn.Embedding(64, 16)
        self.head = torch.nn.Linear(16, 8)
        self.register_buffer("position_ids", torch.arange(64)[None], persistent=False)

    def forward(self, ids):
        return self.head(self.tokens(ids) + self.positions(self.position_ids[:, :ids.shape[1]]))


def test_a_bucket_keeps_within_the_models_own_range():
    """64 position embeddings bound the sequence symbol: the bucket ends there."""
    model = PositionEmbedded().eval()
    compiled = torch.compile(model, backend="twintrack", dynamic=True)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for batch, seq in ((2, 16), (3, 64), (5, 9)):
            ids = torch.randint(0, 128, (batch, seq), generator=generator)
            torch.testing.assert_close(compiled(ids).double(), _float64_reference(model, (ids,)),
                                       rtol=1e-4, atol=1e-5)
    stats = dynamo_backend.stats()
    assert (stats.compiled, stats.fallbacks, stats.recompiles) == (1, [], []), stats


def test_a_size_past_the_bucket_is_a_recompile(monkeypatch):
    monkeypatch.setattr(dynamo_backend, "bucket_width", lambda target: 4)
    model = _mlp()
    compiled = torch.compile(model, backend="twintrack", dynamic=True)
    for batch in (3, 4, 6, 2):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    stats = dynamo_backend.stats()
    assert stats.compiled == 2 and len(stats.recompiles) == 1, stats  # [2, 4] for 3, 4 and 2; [5, 8] for 6
    assert "= 6 in [5, 8] (past the buckets compiled before)" in stats.recompiles[0]


def test_past_the_recompile_limit_a_symbolic_graph_runs_eagerly(monkeypatch):
    monkeypatch.setattr(dynamo_backend, "bucket_width", lambda target: 1)  # every size a bucket of its own
    model = _mlp()
    compiled = torch.compile(model, backend="twintrack")
    with torch._dynamo.config.patch(recompile_limit=2), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in (2, 3, 4, 5):
            x = torch.randn(batch, 8)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x))
    assert any("buckets of sizes" in str(w.message) for w in caught)
    assert dynamo_backend.stats().compiled == 3  # the static graph, then two buckets


class RotaryHalf(torch.nn.Module):
    """Writes half of a fresh tensor in place: the graph makes a tensor of its
    own (a clone) and scatters into it, in the forward and the backward."""
    def forward(self, x):
        y = x.clone()
        y[..., :4] = x[..., :4] * 2
        return y.sum()


def test_a_training_miss_goes_to_inductor_with_the_tensors_it_makes(graph_cache):
    """Inductor retraces a miss under its inputs' fake mode: a tensor the
    graph makes was real before, and the slice_scatter mixing it with a fake
    input failed (the LLaMA layer's rotary update on the GPU machine)."""
    model = RotaryHalf()
    x = torch.randn(2, 3, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(model, backend="twintrack", options={"on_miss": "inductor"})
        compiled(x).backward()
    expected = torch.ones(2, 3, 8)
    expected[..., :4] = 2
    torch.testing.assert_close(x.grad, expected)
    assert dynamo_backend.stats().inductor == 2 and dynamo_backend.stats().compiled == 0
