"""The persistent compile cache: a repeated tools/compile.py command is a
hit without torch, a changed model file or option is a miss, a graph
compiled before under another name is reused, and a cache that cannot be
written never fails a compile."""

import json
import subprocess
import sys
import textwrap

import pytest

from twintrack.compiler import compile_cache
from twintrack.cli import compile as compile_cli

FACTORY = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * {scale}

def build():
    return Model(), (torch.randn(4, 8),)
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("TWINTRACK_CACHE_DIR", str(directory))
    monkeypatch.delenv("TWINTRACK_CACHE", raising=False)
    return directory


def _factory(tmp_path, scale: float = 2.0):
    path = tmp_path / "model.py"
    path.write_text(FACTORY.format(scale=scale))
    return f"{path}:build"


def _compile(model: str, outdir, *flags: str) -> dict:
    assert compile_cli.entry([model, "-o", str(outdir), "-q", *flags]) == 0
    return json.loads((outdir / "manifest.json").read_text())


def test_a_repeat_is_a_hit_with_the_same_artifact(cache_dir, tmp_path):
    model = _factory(tmp_path)
    first = _compile(model, tmp_path / "a")
    second = _compile(model, tmp_path / "b")
    assert first.get("compile_cache") != "hit" and second["compile_cache"] == "hit"
    assert (tmp_path / "a" / "executable.mlir").read_text() == (tmp_path / "b" / "executable.mlir").read_text()
    assert sorted(p.name for p in (tmp_path / "a" / "stages").iterdir()) == \
        sorted(p.name for p in (tmp_path / "b" / "stages").iterdir())


def test_an_edited_model_or_another_option_is_a_miss(cache_dir, tmp_path):
    model = _factory(tmp_path)
    _compile(model, tmp_path / "a")
    assert _compile(model, tmp_path / "b", "--no-fusion").get("compile_cache") != "hit"
    _factory(tmp_path, scale=3.0)
    edited = _compile(model, tmp_path / "c")
    assert edited.get("compile_cache") != "hit"
    assert "3.0" in (tmp_path / "c" / "stages" / "00-fx.txt").read_text()


def test_another_command_for_the_same_graph_reuses_its_artifact(cache_dir, tmp_path):
    model = _factory(tmp_path)
    _compile(model, tmp_path / "a")
    again = _compile(model, tmp_path / "b", "--dtype", "float32")  # the model's own dtype: the same graph
    assert again["compile_cache"] == "hit" and again["dtype"] == "float32"


def test_turned_off_it_neither_reads_nor_writes(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TWINTRACK_CACHE", "0")
    model = _factory(tmp_path)
    _compile(model, tmp_path / "a")
    assert _compile(model, tmp_path / "b").get("compile_cache") != "hit"
    assert not cache_dir.exists()


def test_an_unwritable_cache_does_not_fail_the_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TWINTRACK_CACHE_DIR", str(blocker / "cache"))
    model = _factory(tmp_path)
    _compile(model, tmp_path / "a")
    assert _compile(model, tmp_path / "b").get("compile_cache") != "hit"


def test_a_hit_does_not_import_torch(cache_dir, tmp_path):
    model = _factory(tmp_path)
    _compile(model, tmp_path / "a")
    probe = textwrap.dedent(f"""
        import sys
        from twintrack.cli import compile as compile_cli
        assert compile_cli.entry([{model!r}, "-o", {str(tmp_path / 'b')!r}, "-q"]) == 0
        print("torch" in sys.modules)
    """)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["compile_cache"] == "hit"


def test_least_recently_used_entries_go_past_the_limit(cache_dir):
    for index in range(3):
        compile_cache.store_cubin(f"kernel{index}", b"x" * (400 << 10), "report")
    assert compile_cache.evict_past_limit(limit_mb=1) == 1
    assert compile_cache.find_cubin("kernel0") is None
    assert compile_cache.find_cubin("kernel2") == (b"x" * (400 << 10), "report")
    assert compile_cache.clear() == 2


def test_the_cache_tool_shows_and_clears(cache_dir, tmp_path, capsys):
    from twintrack.cli import cache as cache_cli
    _compile(_factory(tmp_path), tmp_path / "a")
    assert cache_cli.entry(["show"]) == 0
    shown = capsys.readouterr().out
    assert str(cache_dir) in shown and "artifacts       1 entries" in shown
    assert cache_cli.entry(["clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert compile_cache.entries() == []


def test_damaged_entries_are_misses(cache_dir, tmp_path):
    model = _factory(tmp_path)
    _compile(model, tmp_path / "a")
    for entry in (cache_dir / "requests").iterdir():
        entry.write_text('{"files": 3}')
    for artifact in (cache_dir / "artifacts").iterdir():
        (artifact / "manifest.json").unlink()
    again = _compile(model, tmp_path / "b")
    assert again.get("compile_cache") != "hit"
    assert (tmp_path / "b" / "executable.mlir").is_file()


def test_a_cpu_executable_loads_its_cached_machine_code(cache_dir, tmp_path):
    """The JIT's machine code is kept as a shared library: a second load of
    the same executable opens it (no JIT), and computes the same; a manifest
    edited to disagree with it is refused as the executable's own record would be."""
    import torch

    import twintrack
    from twintrack.compiler.cpu_jit import CpuExecutable
    from twintrack.errors import ArtifactError
    from twintrack.harness import zoo
    model, inputs = zoo.build("transformer_block?batch=2&seq=16&dim=32&heads=4")
    first = twintrack.compile(model, inputs)
    second = twintrack.compile(model, inputs)
    assert not first._executable.native and second._executable.native
    assert len([p for p in (cache_dir / "native").iterdir() if not p.name.startswith("buffer-pool")]) == 1
    torch.testing.assert_close(second(*inputs), first(*inputs), rtol=0, atol=0)
    outdir = tmp_path / "artifact"
    manifest = first.save(outdir)
    text = (outdir / manifest["executable"]).read_text()
    arguments = second._executable.arguments
    with pytest.raises(ArtifactError, match="not what the executable takes"):
        CpuExecutable(text, arguments[1:], second._executable.outputs)


def test_inputs_the_code_never_reads_still_key_the_machine_code(cache_dir):
    """Two graphs alike but for the dtype of an input whose only reader is
    dead have the same LLVM text (the GPU track's generic kernels, run on
    the CPU): each gets its own machine code (the signature is in the
    key), not the other's refused. (Found by the dynamic fuzz campaign.)"""
    import torch

    import twintrack
    from twintrack.harness.gpu_emulation import emulated_model

    class DeadRead(torch.nn.Module):
        def forward(self, x, y):
            torch.floor_divide(x, y)
            return x * 2

    x = torch.randn(5, 4)
    for y in (torch.tensor(1.5), torch.tensor(3, dtype=torch.int32)):
        run = emulated_model(twintrack.export(DeadRead(), (x, y), checks=False, dynamic="x:0=rows[2,16]"))
        torch.testing.assert_close(run(x, y), x * 2)


def test_the_compilers_identity_holds_its_cpp(monkeypatch, tmp_path):
    """A rebuilt C++ extension (the fusion pass) changes the compiler's
    fingerprint, and edited C++ sources the portable one: a cached artifact
    the old pass made is not served."""
    compile_cache.compiler_fingerprint.cache_clear()
    before = compile_cache.compiler_fingerprint()
    monkeypatch.setattr(compile_cache, "_extension_digest", lambda: "another build")
    compile_cache.compiler_fingerprint.cache_clear()
    assert compile_cache.compiler_fingerprint() != before
    compile_cache.compiler_fingerprint.cache_clear()

    tree = tmp_path / "tree"
    package = tree / "python" / "twintrack"
    package.mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (tree / "dialects").mkdir()
    source = tree / "dialects" / "Pass.cpp"
    source.write_text("int a;\n")
    monkeypatch.setattr(compile_cache, "PACKAGE_DIR", package)
    compile_cache.portable_fingerprint.cache_clear()
    first = compile_cache.portable_fingerprint()
    source.write_text("int b;\n")
    compile_cache.portable_fingerprint.cache_clear()
    assert compile_cache.portable_fingerprint() != first
    compile_cache.portable_fingerprint.cache_clear()


def test_in_process_compile_leaves_the_garbage_collector_as_it_was(tmp_path, monkeypatch):
    """The compile command pauses Python's cyclic collector (its full passes
    over torch's objects are 7% of a small compile) and restores it,
    enabled or not, for a caller that compiles in its own process."""
    import gc
    seen = []
    real_main = compile_cli.main
    monkeypatch.setattr(compile_cli, "main", lambda args: seen.append(gc.isenabled()) or real_main(args))
    was_enabled = gc.isenabled()
    try:
        for enabled in (True, False):
            gc.enable() if enabled else gc.disable()
            assert compile_cli.entry(["zoo:gemm", "-o", str(tmp_path / f"o{enabled}"), "-q"]) == 0
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was_enabled else gc.disable()
    assert seen == [False, False]
