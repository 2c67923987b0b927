"""The staged Python API, in the style of jax.jit(f).lower().compile():

    exported = twintrack.export(model, example_inputs)   # .as_text(): the FX graph
    lowered = exported.lower(to="linalg")                 # .as_text(): that stage's IR
    compiled = lowered.compile(target="cpu")              # callable on torch tensors
    twintrack.compile(model, example_inputs)              # all of the above
"""

from __future__ import annotations

from pathlib import Path

import torch

from .driver import Compilation, compile_exported, copy_compilation, full_text, resume
from .errors import UsageError
from .frontend import ExportedModel, ModelSource, export_model, model_state
from .options import CompileOptions


class Exported:
    def __init__(self, source: ModelSource, exported: ExportedModel):
        self.source, self.exported = source, exported

    def as_text(self) -> str:
        """The FX graph of the exported program."""
        return self.exported.fx_text()

    def lower(self, to: str | None = "linalg", target: str = "cpu") -> "Lowered":
        """Run the target's stages up to `to` (None: all of them)."""
        options = CompileOptions(pipeline=target, freeze=self.exported.frozen, stop_after=to,
                                 allow_tf32=torch.backends.cuda.matmul.allow_tf32)
        return Lowered(self, compile_exported(self.exported, options))

    def compile(self, target: str = "cpu") -> "Compiled":
        return self.lower(to=None, target=target).compile(target)


class Lowered:
    def __init__(self, exported: Exported, compilation: Compilation):
        self.exported, self.compilation = exported, compilation

    @property
    def stage(self) -> str:
        return self.compilation.last_stage

    def as_text(self, stage: str | None = None) -> str:
        return self.compilation.text(stage)

    def save(self, outdir: str | Path) -> dict:
        from .artifact import atomic_directory, write_artifact
        with atomic_directory(Path(outdir)) as staging:
            return write_artifact(staging, self.compilation, self.exported.source.spec)

    def compile(self, target: str = "cpu") -> "Compiled":
        if target != self.compilation.recipe.target:
            raise UsageError(f"lowered for '{self.compilation.recipe.target}', cannot compile for '{target}'")
        return Compiled(self.exported, resume(copy_compilation(self.compilation)))


class Compiled:
    """Callable like the model: takes its inputs, returns its (flattened) outputs.
    A GPU compilation takes and returns CUDA tensors."""

    def __init__(self, exported: Exported, compilation: Compilation):
        self.exported, self.compilation = exported, compilation
        model = exported.exported
        self._state = [] if model.frozen else list(model_state(exported.source.module).values())
        if compilation.recipe.target == "gpu":
            self._executable = self._gpu_executable()
            self._state = [t.cuda() for t in self._state] if torch.cuda.is_available() else self._state
        else:
            from .cpu_jit import CpuExecutable
            self._executable = CpuExecutable(full_text(compilation.module), model.arguments, model.outputs)

    def _gpu_executable(self):
        """Package the kernels and plan into a private directory and load it."""
        import tempfile

        from .artifact import write_artifact
        from .runtime import GpuExecutable
        self._artifact = tempfile.TemporaryDirectory(prefix="twintrack-gpu-")  # removed with this object
        write_artifact(Path(self._artifact.name), self.compilation, self.exported.source.spec)
        return GpuExecutable(self._artifact.name)

    def as_text(self) -> str:
        return self.compilation.text()

    def __call__(self, *inputs: torch.Tensor):
        outputs = self._executable(*self._state, *inputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def export(model: torch.nn.Module, example_inputs, freeze: bool = False) -> Exported:
    inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    source = ModelSource(f"<{type(model).__name__}>", model.eval(), inputs)
    return Exported(source, export_model(source, freeze=freeze))


def compile(model: torch.nn.Module, example_inputs, target: str = "cpu", freeze: bool = False) -> Compiled:
    return export(model, example_inputs, freeze=freeze).compile(target)


def load(outdir: str | Path):
    """Load an artifact directory; returns a callable over (state..., inputs...)."""
    from .artifact import read_manifest, specs
    from .errors import ArtifactError
    manifest = read_manifest(Path(outdir))
    if manifest.get("executable") is None:
        raise ArtifactError(f"{outdir}: compiled with --stop-after; nothing to run")
    if manifest["pipeline"] == "gpu":
        from .runtime import GpuExecutable
        return GpuExecutable(outdir)
    from .cpu_jit import CpuExecutable
    text = (Path(outdir) / manifest["executable"]).read_text()
    return CpuExecutable(text, specs(manifest, "arguments"), specs(manifest, "outputs"))


