"""The staged Python API, in the style of jax.jit(f).lower().compile():

    exported = twintrack.export(model, example_inputs)   # .as_text(): the FX graph
    lowered = exported.lower(to="linalg")                 # .as_text(): that stage's IR
    compiled = lowered.compile(target="cpu")              # callable on torch tensors
    twintrack.compile(model, example_inputs)              # all of the above
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import torch

from .calling import LoadedArtifact
from .compiler.driver import Compilation, compile_exported, copy_compilation, resume
from .errors import InputMismatchError, UsageError
from .frontend.export import ExportedModel, ModelSource, export_model, model_state
from .compiler.options import CompileOptions
from .dynamic_shapes import DynamicDim, check_dims, parse_dynamic


class Exported:
    def __init__(self, source: ModelSource, exported: ExportedModel):
        self.source, self.exported = source, exported

    def as_text(self) -> str:
        """The FX graph of the exported program."""
        return self.exported.fx_text()

    def lower(self, to: str | None = "linalg", target: str = "cpu", emulate_precision_casts: bool = False,
              fast_kernels: bool = True) -> "Lowered":
        """Run the target's stages up to `to` (None: all of them).
        `emulate_precision_casts`: f16/bf16 ops round each result as eager's
        (CompileOptions.emulate_precision_casts); `fast_kernels`: False skips
        the hand-scheduled kernel stages (the generic loops only)."""
        options = CompileOptions(pipeline=target, freeze=self.exported.frozen, stop_after=to,
                                 allow_tf32=torch.backends.cuda.matmul.allow_tf32,
                                 emulate_precision_casts=emulate_precision_casts, fast_kernels=fast_kernels)
        return Lowered(self, compile_exported(self.exported, options))

    def compile(self, target: str = "cpu", emulate_precision_casts: bool = False) -> "Compiled":
        lowered = self.lower(to=None, target=target, emulate_precision_casts=emulate_precision_casts)
        return Compiled(self, lowered.compilation)  # nothing left to resume: no copy

    def lower_with(self, options: CompileOptions) -> "Lowered":
        """Every stage, under `options` (any CompileOptions: fusion, tf32, a tuning cache...)."""
        options = replace(options, freeze=self.exported.frozen, stop_after=None)
        return Lowered(self, compile_exported(self.exported, options))

    def compile_with(self, options: CompileOptions) -> "Compiled":
        return Compiled(self, self.lower_with(options).compilation)

    def state(self) -> list[torch.Tensor]:
        """The parameters and buffers the compiled function takes first (none when frozen)."""
        return [] if self.exported.frozen else list(model_state(self.source.module).values())


class Lowered:
    def __init__(self, exported: Exported, compilation: Compilation):
        self.exported, self.compilation = exported, compilation

    @property
    def stage(self) -> str:
        return self.compilation.last_stage

    def as_text(self, stage: str | None = None) -> str:
        return self.compilation.text(stage)

    def save(self, outdir: str | Path, with_state: bool = False, stages: bool = True) -> dict:
        """Write this compile's artifact; `with_state`: with the model's
        parameters and buffers (state.pt), so that it runs on the inputs
        alone; `stages`: with the IR after every stage (stages/), which
        nothing that runs the artifact reads (a cache leaves it out)."""
        return _save_artifact(Path(outdir), self.compilation, self.exported.source.spec,
                              self.exported.state() if with_state else [], stages)

    def finished(self) -> "Compiled":
        """The callable of a compilation that ran every stage (`Exported.lower_with`), without a copy."""
        if self.compilation.last_stage != self.compilation.recipe.stage_names()[-1]:
            raise UsageError(f"lowered to {self.compilation.last_stage}, not through every stage: use compile()")
        return Compiled(self.exported, self.compilation)

    def compile(self, target: str = "cpu") -> "Compiled":
        if target != self.compilation.recipe.target:
            raise UsageError(f"lowered for '{self.compilation.recipe.target}', cannot compile for '{target}'")
        return Compiled(self.exported, resume(copy_compilation(self.compilation)))


class Compiled:
    """Callable like the model: takes its inputs (tensors, and the Python
    scalars it was compiled for), returns what the model returns (a tensor,
    a tuple, a dict, None...), and applies the model's in-place updates of
    its inputs and buffers. A GPU compilation takes and returns CUDA tensors."""

    def __init__(self, exported: Exported, compilation: Compilation):
        self.exported, self.compilation = exported, compilation
        model = exported.exported
        self._state = exported.state()
        if compilation.recipe.target == "gpu":
            self._executable = self._gpu_executable()
            self._state = [t.cuda() for t in self._state] if torch.cuda.is_available() else self._state
        else:
            from .compiler.cpu_jit import CpuExecutable, executable_text
            text = executable_text(compilation.module, model.arguments, model.outputs)
            self._executable = CpuExecutable(text, model.arguments, model.outputs, dynamic=model.dynamic)
        self._taken_state = model.calling.executable_arguments(self._state)  # views, made once

    def _gpu_executable(self):
        """Package the kernels and plan into a private directory and load it."""
        import tempfile

        from .compiler.artifact_writer import write_artifact
        from .runtime import GpuExecutable
        self._artifact = tempfile.TemporaryDirectory(prefix="twintrack-gpu-")  # removed with this object
        write_artifact(Path(self._artifact.name), self.compilation, self.exported.source.spec, stages=False)
        return GpuExecutable(self._artifact.name)

    def as_text(self) -> str:
        return self.compilation.text()

    def save(self, outdir: str | Path) -> dict:
        """Write this compile's artifact, with the model's parameters and
        buffers (state.pt), so `twintrack.load(outdir)` runs it anywhere,
        on the inputs alone."""
        return _save_artifact(Path(outdir), self.compilation, self.exported.source.spec, self._state)

    @property
    def poison_outputs(self) -> bool:
        """Whether each call's outputs start as NaN (0 for integers), so that
        an element the program never writes shows: the checked runs of the
        tools set it; a plain call does not pay for the fill."""
        return self._executable.poison_outputs

    @poison_outputs.setter
    def poison_outputs(self, value: bool) -> None:
        self._executable.poison_outputs = value

    def __call__(self, *inputs):
        model = self.exported.exported
        tensors = scalar_checked(inputs, model.scalars, len(model.inputs))
        arguments = [*self._state, *tensors]
        return model.calling.call(self._executable, arguments, self._taken_state)


def _save_artifact(outdir: Path, compilation: Compilation, spec: str, state: list, stages: bool = True) -> dict:
    """The artifact directory, whole or not at all, with `state` (state.pt) where there is one."""
    from .runtime.artifact import atomic_directory, write_state
    from .compiler.artifact_writer import write_artifact
    with atomic_directory(outdir) as staging:
        manifest = write_artifact(staging, compilation, spec, stages=stages)
        write_state(staging, manifest, state)
    return manifest


def export(model: torch.nn.Module, example_inputs, freeze: bool = False, checks: bool = True,
           dynamic: str | list[DynamicDim] | None = None, state_inputs: tuple[int, ...] = ()) -> Exported:
    """The model as it is: in train mode, dropout stays on and batch norm
    updates its running statistics (in place, as eager). Python scalar
    inputs (int, float, bool) are compiled in as constants. `checks`: the
    run-time guards (integer division by zero, indices out of range raise
    as in eager; frontend/fx_passes/guards.py). `dynamic`: the input dims
    left open, as `--dynamic` writes them ('x:0=batch[1,64],x:1=seq[1,512]',
    twintrack.dynamic_shapes) or as DynamicDims: one compile then serves
    every size in range, and a call outside it is refused. `state_inputs`:
    the inputs (by position) that hold state, the same tensors call after
    call (torch.compile's parameters): on the GPU, work on them alone runs
    once, and again only when they change."""
    inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    tensors = tuple(x for x in inputs if isinstance(x, torch.Tensor))
    scalars = {i: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
    for position, value in scalars.items():
        if not isinstance(value, (bool, int, float)):
            raise UsageError(f"example input {position} is a {type(value).__name__}; "
                             f"inputs are tensors or Python int/float/bool")
    _warn_about_autograd(model, tensors)
    tensor_positions = [i for i in range(len(inputs)) if i not in scalars]
    state = tuple(tensor_positions.index(i) for i in state_inputs if i in tensor_positions)
    source = ModelSource(f"<{type(model).__name__}>", model, tensors, scalars, state_inputs=state)
    source.dynamic = dynamic_dims(source, dynamic)
    return Exported(source, export_model(source, freeze=freeze, checks=checks))


def dynamic_dims(source: ModelSource, dynamic: str | list[DynamicDim] | None) -> list[DynamicDim]:
    """`dynamic` read against the model's inputs (names from its forward's parameters)."""
    if dynamic is None:
        return []
    if isinstance(dynamic, str):
        return parse_dynamic(dynamic, source.input_names(), source.example_inputs)
    check_dims(list(dynamic), source.example_inputs)
    return list(dynamic)


def scalar_checked(inputs: tuple, scalars: dict, tensor_count: int) -> list:
    """The tensor inputs of a call, after checking that its scalar inputs
    are the values the program was compiled for."""
    if len(inputs) != tensor_count + len(scalars):
        raise InputMismatchError(f"expected {tensor_count + len(scalars)} inputs, got {len(inputs)}")
    for position, value in scalars.items():
        given = inputs[position]
        if type(given) is not type(value) or given != value:
            raise InputMismatchError(f"input {position} was compiled as the constant {value!r}, got {given!r}; "
                                     f"compile again for another value")
    return [x for i, x in enumerate(inputs) if i not in scalars]


def _warn_about_autograd(model: torch.nn.Module, inputs: tuple) -> None:
    wants_grad = any(x.requires_grad for x in inputs) or (model.training and any(p.requires_grad for p in model.parameters()))
    if wants_grad and torch.is_grad_enabled():
        warnings.warn("twintrack compiles the forward pass only: its outputs do not require grad "
                      "(no backward through compiled code)", stacklevel=3)


def compile(model: torch.nn.Module, example_inputs, target: str = "cpu", freeze: bool = False,
            checks: bool | None = None, emulate_precision_casts: bool = False,
            dynamic: str | list[DynamicDim] | None = None) -> Compiled:
    """`checks`: the run-time guards; default on for the CPU, off for the GPU
    (where each costs a reduction kernel and a synchronization).
    `emulate_precision_casts`: f16/bf16 ops round each result as eager's; by
    default a fused kernel keeps its intermediates in f32, as Inductor's."""
    checks = target == "cpu" if checks is None else checks
    return export(model, example_inputs, freeze=freeze, checks=checks, dynamic=dynamic).compile(
        target, emulate_precision_casts)


def load(outdir: str | Path) -> "LoadedArtifact":
    """Load an artifact directory: a callable over (state..., inputs...)
    tensors that returns what the model returns (its scalar inputs were
    compiled in)."""
    from .runtime.artifact import calling_convention, dynamic_dims, read_manifest, read_state, specs
    from .errors import ArtifactError
    manifest = read_manifest(Path(outdir))
    if manifest.get("executable") is None:
        raise ArtifactError(f"{outdir}: compiled with --stop-after; nothing to run")
    if manifest["pipeline"] == "gpu":
        from . import runtime
        return runtime.load(outdir)
    from .compiler.cpu_jit import CpuExecutable
    try:
        text = (Path(outdir) / manifest["executable"]).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{outdir}: cannot read its executable ({type(e).__name__})") from None
    executable = CpuExecutable(text, specs(manifest, "arguments"), specs(manifest, "outputs"),
                               dynamic=dynamic_dims(manifest))
    return LoadedArtifact(executable, calling_convention(manifest), read_state(Path(outdir), manifest),
                          len(manifest["inputs"]))
