"""The staged driver: runs a recipe's stages in order, verifies and keeps the
IR after each one, and turns pass failures into CompilerErrors with
reproducers.

Stages before the hand-over run in torch-mlir's bundled MLIR; later ones in
the upstream `mlir` bindings. IR crosses between them as generic-form text.
"""

from __future__ import annotations

import signal
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable

from ..bindings import bindings as _bindings
from ..bindings import new_context
from ..dialect import operation_text
from ..errors import CompilerError, UsageError
from ..frontend.export import ExportedModel, import_to_torch_mlir
from ..locations import short_location
from .options import CompileOptions
from ..phases import phase
from .recipes import PipelineVariables, Recipe, StageRecipe, load_recipe
from .reproducer import Reproducer


@dataclass
class StageDump:
    """The IR after one stage. Its text is rendered when first asked for:
    rendering every stage of a large module took longer than running them."""
    index: int
    name: str
    seconds: float              # the stage's own run time
    snapshot: object = None     # a copy of the module after the stage
    rendered: str | None = None

    @property
    def text(self) -> str:
        if self.rendered is None:
            with phase("stage dumps (text)"):
                self.rendered = readable_text(self.snapshot)
        return self.rendered

    @property
    def file_name(self) -> str:
        return f"{self.index:02d}-{self.name}.{'txt' if self.name == 'fx' else 'mlir'}"


@dataclass(frozen=True)
class KernelFallback:
    """A fast-path kernel that failed to build (a compiler bug): its site
    went to the generic path. `reproducer` replays the failing pass, strict."""
    stage: str
    kernel: str
    message: str
    reproducer: Reproducer


class KernelFallbackWarning(UserWarning):
    """A fast-path kernel failed to build and its site took the generic path."""


@dataclass
class Compilation:
    exported: ExportedModel
    recipe: Recipe
    options: CompileOptions
    dumps: list[StageDump] = field(default_factory=list)
    module: object = None      # the last stage's module (mlir or torch_mlir bindings)
    remarks: list[str] = field(default_factory=list)  # 'location: message', from passes that explain
    fallbacks: list[KernelFallback] = field(default_factory=list)  # fast-path kernels that went generic
    schedules: dict[str, str] = field(default_factory=dict)  # 'location kernel' -> schedule and reasons (CPU kernels)

    @property
    def last_stage(self) -> str:
        return self.dumps[-1].name

    def text(self, stage: str | None = None) -> str:
        stage = stage or self.last_stage
        for dump in self.dumps:
            if dump.name == stage:
                return dump.text
        raise UsageError(f"stage '{stage}' was not run (ran: {', '.join(d.name for d in self.dumps)})")


ProgressFn = Callable[[StageDump], None]


def compile_exported(exported: ExportedModel, options: CompileOptions,
                     on_stage: ProgressFn | None = None) -> Compilation:
    variables = PipelineVariables(options.arch, options.pipeline, options.fusion, options.explain_fusion,
                                  options.lowering_dir, options.allow_tf32, options.strict_kernels,
                                  options.tuning_cache, options.tuning_variant,
                                  emulate_precision_casts=options.emulate_precision_casts,
                                  threads=options.resolved_cpu_threads() if options.pipeline == "cpu" else 1)
    recipe = load_recipe(options.pipeline, options.lowering_dir, variables)
    result = Compilation(exported, recipe, options)
    _record(result, StageDump(0, "fx", 0.0, rendered=exported.fx_text()), on_stage)
    return resume(result, options.stop_after, on_stage)


def resume(result: Compilation, stop_after: str | None = None,
           on_stage: ProgressFn | None = None) -> Compilation:
    """Run the stages after `result.last_stage`, up to `stop_after` (None: all)."""
    names = result.recipe.stage_names()
    if stop_after is not None and stop_after not in names:
        raise UsageError(f"unknown stage '{stop_after}' for pipeline '{result.recipe.target}' "
                         f"(stages: {', '.join(names)})")
    if stop_after is not None and names.index(stop_after) <= names.index(result.last_stage):
        return result
    if result.module is None:
        with phase("torch-mlir import"):
            result.module = import_to_torch_mlir(result.exported)
    module, before = result.module, _snapshot(result.module)
    for stage in result.recipe.stages[names.index(result.last_stage):]:
        start = time.perf_counter()
        if result.options.fast_kernels or not stage.fast_path:
            with phase(f"stage {stage.name}"):
                module = run_stage(stage, module, result.remarks, result.fallbacks, before, result.schedules)
        seconds = time.perf_counter() - start
        result.module, before = module, _snapshot(module)
        _record(result, StageDump(len(result.dumps), stage.name, seconds, before), on_stage)
        if stage.name == stop_after:
            break
    return result


def _snapshot(module):
    """A copy of `module`, kept as a stage's dump and the next stage's
    reproducer input (copying takes a twentieth of rendering it)."""
    with phase("stage dumps (copy)"):
        return module.operation.clone()


def readable_text(module) -> str:
    """A stage dump: large constants and every weight blob elided, so dumps
    stay readable and small (the complete module is kept in
    Compilation.module). The stage's pass manager verified it: the printer
    need not again. (A resource limit above 0 cost 14 ms a dump of a frozen
    MLP's 12 MB of weights, whatever their size; 0 costs 2 ms.)"""
    try:
        return operation_text(module, large_elements_limit=16, large_resource_limit=0, assume_verified=True)
    except TypeError:  # torch-mlir's bindings predate large_resource_limit
        return operation_text(module, large_elements_limit=16, assume_verified=True)


def generic_text(module) -> str:
    """The module as a reproducer's input: generic form, with locations."""
    return operation_text(module, print_generic_op_form=True, enable_debug_info=True)


def _record(result: Compilation, dump: StageDump, on_stage: ProgressFn | None) -> None:
    result.dumps.append(dump)
    if on_stage:
        on_stage(dump)


def copy_compilation(result: Compilation) -> Compilation:
    """An independent copy (its own module), so resuming it leaves `result` as it was."""
    module = result.module
    if module is not None:
        module = _reparse(module, _module_binding(module))
    return replace(result, dumps=list(result.dumps), module=module)


# ---------------------------------------------------------------- stages

def run_stage(stage: StageRecipe, module, remarks: list[str] | None = None,
              fallbacks: list[KernelFallback] | None = None, before=None, schedules: dict[str, str] | None = None):
    """Run one stage on `module`, moving it to the stage's bindings first.
    Remarks the passes emit (e.g. the fusion cost model's, with explain)
    are appended to `remarks` as 'location: message'; kernels that fell
    back to the generic path (a warning each) to `fallbacks`; the CPU
    kernels' schedules to `schedules`. `before`: a copy of `module` (taken
    here if not given), rendered as the reproducer's input only if the
    stage fails."""
    module = _in_bindings(module, stage.binding, stage.name)
    bindings = _bindings(stage.binding)
    before = module.operation.clone() if before is None else before

    def input_ir() -> str:
        return generic_text(before)

    with module.context:
        pm = _pass_manager(stage, bindings)
        handler = module.context.attach_diagnostic_handler(_remark_collector(bindings, remarks))
        try:
            with _interrupts_held():
                pm.run(module.operation)
                with phase("verify each stage's output"):
                    module.operation.verify()
        except bindings.ir.MLIRError as e:
            raise _stage_error(stage, e, input_ir) from None
        except UsageError:  # the user's input a pass reads (a tile table of --lowering-dir): no bug to reproduce
            raise
        except Exception as e:  # a bug in a Python pass: still a reproducible, named failure
            raise _stage_error(stage, RuntimeError(f"internal error: {_brief_error(e)}"), input_ir) from e
        finally:
            handler.detach()
    if stage.python_passes:
        _collect_fallbacks(stage, module, input_ir, fallbacks, remarks, schedules)
    return module


@contextmanager
def _interrupts_held():
    """A Ctrl-C (or SIGTERM) that arrives while MLIR runs a stage is held
    and raised once the pass manager returns: raised inside a Python
    callback (a Python pass, the diagnostic handler collecting remarks), the
    bindings swallow it and the compile goes on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, frame: received.append(signum)) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            signal.raise_signal(received[0])


def _collect_fallbacks(stage: StageRecipe, module, input_ir: Callable[[], str], fallbacks: list[KernelFallback] | None,
                       remarks: list[str] | None, schedules: dict[str, str] | None) -> None:
    """Take the kernel passes' records off the module: a warning and a
    reproducer (the stage's passes, strict) for each kernel that failed to
    build; a remark for each op no fast path took, with the reason; each
    kernel's schedule and its reasons."""
    from .passes.kernel_fallback import take_records
    failed, refused, scheduled = take_records(module.operation)
    if schedules is not None:
        schedules.update(scheduled)
    if remarks is not None:
        remarks += [f"{op}: {stage.name}: generic path: {reason}" for op, reason in refused.items()]
    strict = [spec.replace("strict=false", "strict=true") for spec in stage.python_passes]
    for kernel, message in failed.items():
        warnings.warn(f"twintrack: {message}; the site takes the generic path", KernelFallbackWarning, stacklevel=2)
        if fallbacks is not None:
            fallbacks.append(KernelFallback(stage.name, kernel, message,
                                            Reproducer.for_python_passes(stage.name, strict, input_ir(), message)))


def _brief_error(error: Exception) -> str:
    """One line: a kernel's build failure whole (it names the kernel, its
    schedule and the torch op first), any other error's last 300 characters."""
    from .kernels.builder import KernelBuildError
    text = " ".join(str(error).split())
    return text if isinstance(error, KernelBuildError) else text[-300:]


def _remark_collector(bindings, remarks: list[str] | None):
    """A diagnostic handler that keeps remarks and lets everything else through."""
    def handle(diagnostic) -> bool:
        if diagnostic.severity != bindings.ir.DiagnosticSeverity.REMARK:
            return False
        if remarks is not None:
            remarks.append(f"{short_location(diagnostic.location)}: {diagnostic.message}")
        return True
    return handle


def _pass_manager(stage: StageRecipe, bindings):
    """The stage's passes, verified together once they have all run (by
    run_stage): verifying after every pass took ViT-Base's compile 1.7 s."""
    if stage.python_passes:
        pm = bindings.passmanager.PassManager()
        for python_pass in _python_passes(stage):
            python_pass.add_to(pm)
    else:
        try:
            pm = bindings.passmanager.PassManager.parse(stage.pipeline)
        except ValueError as e:
            raise UsageError(f"stage '{stage.name}': bad pass pipeline in recipe: {' '.join(str(e).split())}") from None
    pm.enable_verifier(False)
    return pm


def _stage_error(stage: StageRecipe, error, input_ir: Callable[[], str]) -> CompilerError:
    input_ir = input_ir()
    diagnostics = _format_diagnostics(error, input_ir, stage.binding)
    text = "\n".join(diagnostics)
    if stage.pipeline is not None:
        repro = Reproducer.for_pipeline(stage.name, stage.tool, stage.pipeline, input_ir, text)
    else:
        repro = Reproducer.for_python_passes(stage.name, list(stage.python_passes), input_ir, text)
    return CompilerError(stage.name, diagnostics, repro)


def _format_diagnostics(error, input_ir: str | None = None, binding: str | None = None) -> list[str]:
    """'location: message' per error diagnostic. One at an unknown location
    (an op torch-mlir made without one) is placed from the stage's input IR:
    at the torch op that uses the failing op's results, or the nearest op
    with a location (unknown_locations.locate)."""
    from .unknown_locations import is_unknown, locate
    lines = []
    for info in getattr(error, "error_diagnostics", None) or []:
        where = short_location(info.location)
        if is_unknown(info.location) and input_ir is not None:
            where = locate(info.message, input_ir, binding) or where
        lines.append(f"{where}: {info.message}")
    return lines or [" ".join(str(error).split())]


def _module_binding(module) -> str:
    return "torch_mlir" if type(module).__module__.startswith("torch_mlir") else "mlir"


def _in_bindings(module, binding: str, stage: str):
    if _module_binding(module) == binding:
        return module
    if binding == "mlir":
        _reject_foreign_ops(module, new_context("mlir"), stage)
    return _reparse(module, binding)


def _reparse(module, binding: str):
    """`module` parsed into a fresh context of `binding`, via generic-form text."""
    with phase(f"move IR to {binding}"):
        text = generic_text(module)
        with new_context(binding):
            return _bindings(binding).ir.Module.parse(text)


def _reject_foreign_ops(module, context, stage: str) -> None:
    """Ops torch-mlir left that upstream MLIR does not know (e.g. tm_tensor.*)
    can be lowered by no stage: name each with its torch source location."""
    foreign = []

    def visit(op):
        if not context.is_registered_operation(op.name):
            foreign.append(f"{short_location(op.location)}: op '{op.name}' cannot be lowered by any stage")
        return _bindings("torch_mlir").ir.WalkResult.ADVANCE

    module.operation.walk(visit, _bindings("torch_mlir").ir.WalkOrder.PRE_ORDER)
    if foreign:
        raise CompilerError(stage, foreign)


def _python_passes(stage: StageRecipe) -> list:
    from .passes import instantiate
    try:
        return [instantiate(spec) for spec in stage.python_passes]
    except UsageError as e:
        raise UsageError(f"stage '{stage.name}': {e}") from None
