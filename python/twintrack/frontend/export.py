"""Frontend: MODEL spec -> nn.Module + example inputs -> torch.export -> torch-mlir.

MODEL is one of
  * a file written by torch.export.save (any extension),
  * zoo:NAME[?key=value&...] for a built-in model,
  * path/to/file.py:factory, where factory() returns (module, example_inputs).

Parameters and buffers become leading arguments of the exported function (so
artifacts stay small and run with any state_dict); freeze=True bakes them in.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import logging
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from ..calling import CallingConvention, TensorSpec
from ..dynamic_shapes import DynamicDim
from ..errors import CompilerError, ModelLoadError, TwintrackError, UsageError, user_code
from ..phases import phase
from .decomp import program_table
from .dynamic import ShapeNames, export_dims, mark_dynamic_entry
from .fx_passes import FxReport, run_pipeline
from .fx_passes.aliasing_prims import prims_views_as_aten
from .fx_passes.storage_order import shape_in_module_order


@dataclass
class ModelSource:
    spec: str
    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]   # the tensor arguments
    scalars: dict[int, object] = field(default_factory=dict)  # position -> a Python scalar argument, baked in
    dynamic: list[DynamicDim] = field(default_factory=list)  # the input dims the compile leaves open
    state_inputs: tuple[int, ...] = ()  # the tensor inputs (by number) the caller says hold the model's state

    def input_names(self) -> list[str]:
        """The tensor inputs' names in the model's forward (inputN where it takes *args)."""
        try:
            parameters = list(inspect.signature(self.module.forward).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        named = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        positions = [i for i in range(len(self.example_inputs) + len(self.scalars)) if i not in self.scalars]
        return [named[i] if i < len(named) else f"input{n}" for n, i in enumerate(positions)]

    def call_arguments(self, tensors) -> list:
        """The module's positional arguments: `tensors` with the scalars put back in place."""
        tensors, arguments = iter(tensors), []
        for position in range(len(self.example_inputs) + len(self.scalars)):
            arguments.append(self.scalars[position] if position in self.scalars else next(tensors))
        return arguments


@dataclass
class ExportedModel:
    """A model after torch.export, ready for import into torch-mlir."""

    program: torch.export.ExportedProgram
    state: list[TensorSpec]       # parameters and buffers, in argument order
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]     # the compiled function's results (calling: how they become the module's)
    frozen: bool
    calling: CallingConvention
    scalars: dict[int, object] = field(default_factory=dict)
    dynamic: list[DynamicDim] = field(default_factory=list)  # the dims the shapes' expressions name
    state_inputs: tuple[int, ...] = ()  # inputs holding state (torch.compile's parameters), by number

    @property
    def arguments(self) -> list[TensorSpec]:
        return ([] if self.frozen else self.state) + self.inputs

    def state_arguments(self) -> list[int]:
        """The arguments (by number) holding the model's state: its
        parameters and buffers (none when frozen), then the inputs the
        caller named; work on them alone may run once (parameter-prologue)."""
        leading = len(self.arguments) - len(self.inputs)
        return list(range(leading)) + [leading + i for i in self.state_inputs]

    def fx_text(self) -> str:
        return self.program.graph_module.print_readable(print_output=False)

    def fingerprint(self) -> str:
        """Everything of this program a compile reads, as a key: the graph
        with shapes, dtypes and strides, each op's source lines (kernel
        reports and diagnostics name them), the constants' values, the
        signature and the calling convention."""
        from ..compiler.compile_cache import digest
        graph = self.program.graph_module.print_readable(print_output=False, include_stride=True, include_device=True)
        traces = [node.meta.get("stack_trace") or "" for node in self.program.graph.nodes]
        tensors = {**self.program.state_dict, **self.program.constants}
        values = [f"{name}:{_tensor_digest(tensors[name])}" for name in sorted(tensors)
                  if isinstance(tensors[name], torch.Tensor)]
        specs = [spec.to_json() for spec in self.state + self.inputs + self.outputs]
        return digest(graph, *traces, *values, str(self.program.graph_signature), repr(self.frozen),
                      json.dumps([specs, sorted(self.scalars.items()), self.calling.to_json(),
                                  [dim.to_json() for dim in self.dynamic], list(self.state_inputs)], default=str))


def _tensor_digest(tensor: torch.Tensor) -> str:
    """A digest of a tensor's dtype, shape and values (any dtype, any layout)."""
    from ..compiler.compile_cache import digest
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return digest(f"{flat.dtype}{tuple(tensor.shape)}", flat.view(torch.uint8).numpy().tobytes())


# ---------------------------------------------------------------- loading

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


def load_model(spec: str, dtype: str | None = None) -> ModelSource:
    """Turn a MODEL string into a module in eval mode and its example inputs,
    with floating-point parameters and inputs cast to `dtype` if given."""
    source = _load(spec)
    return source if dtype is None else cast(source, dtype)


def cast(source: ModelSource, dtype: str) -> ModelSource:
    if dtype not in FLOAT_DTYPES:
        raise ModelLoadError(f"unsupported --dtype {dtype} (choose from {', '.join(FLOAT_DTYPES)})")
    target = getattr(torch, dtype)
    inputs = tuple(x.to(target) if x.is_floating_point() else x for x in source.example_inputs)
    return ModelSource(source.spec, source.module.to(target), inputs, dict(source.scalars), list(source.dynamic),
                       source.state_inputs)


def _load(spec: str) -> ModelSource:
    if spec.startswith("zoo:"):
        from ..harness import zoo
        module, inputs = zoo.build(spec.removeprefix("zoo:"))
    elif ".py:" in spec:
        module, inputs = _load_factory(spec)
    else:
        module, inputs = _load_exported_file(spec)
    return ModelSource(spec, _eval_mode(module), _as_input_tuple(inputs, spec))


def _eval_mode(module: torch.nn.Module) -> torch.nn.Module:
    try:
        return module.eval()
    except NotImplementedError:  # modules unflattened from torch.export are already in eval form
        return module


def _as_input_tuple(inputs, spec: str) -> tuple[torch.Tensor, ...]:
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise ModelLoadError(f"{spec}: example input {i} is a {type(x).__name__}; only tensors are supported")
    return inputs


def _load_factory(spec: str):
    """file.py:factory[?k=v&...]: factory(k=v, ...) with integer arguments."""
    path_text, _, call = spec.rpartition(":")
    factory_name, _, query = call.partition("?")
    path = Path(path_text)
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}")
    module_spec = importlib.util.spec_from_file_location(f"twintrack_user_{path.stem}", path)
    user = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(user)
    except Exception as e:
        raise ModelLoadError(f"{path}: failed to import: {type(e).__name__}: {e}") from e
    factory = getattr(user, factory_name, None)
    if not callable(factory):
        raise ModelLoadError(f"{path}: no callable '{factory_name}' (expected factory() -> (module, example_inputs))")
    from ..harness.zoo import integer_parameters
    known = set(inspect.signature(factory).parameters)
    parameters = integer_parameters(query, known, f"{path}:{factory_name}")
    with user_code(f"{spec}: the factory failed"):
        result = factory(**parameters)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise ModelLoadError(f"{spec}: factory must return (torch.nn.Module, example_inputs)")
    return result


def _load_exported_file(spec: str):
    path = Path(spec)
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path} (expected a torch.export.save file, zoo:NAME or file.py:factory)")
    try:
        with warnings.catch_warnings(), _quiet_logger("torch.export"):
            warnings.simplefilter("ignore")
            program = torch.export.load(str(path))
    except Exception as e:
        raise ModelLoadError(f"{path}: not a readable torch.export file ({type(e).__name__}: {' '.join(str(e).split())[:160]})") from None
    args, kwargs = program.example_inputs or ((), {})
    if kwargs:
        raise ModelLoadError(f"{path}: keyword example inputs are not supported")
    if not args:
        raise ModelLoadError(f"{path}: the exported program carries no example inputs")
    module = program.module()
    _constants_as_buffers(module)
    return module, args


def _constants_as_buffers(module: torch.fx.GraphModule) -> None:
    """The tensor constants the graph reads (HF's position ids, rotary
    tables) as non-persistent buffers, so that moving the module to a device
    moves them with the weights."""
    for node in module.graph.nodes:
        if node.op != "get_attr":
            continue
        owner_path, _, name = node.target.rpartition(".")
        owner = module.get_submodule(owner_path) if owner_path else module
        value = getattr(owner, name)
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) and name not in owner._buffers:
            delattr(owner, name)
            owner.register_buffer(name, value, persistent=False)


@contextlib.contextmanager
def _quiet_logger(name: str):
    """torch logs a traceback before raising on a bad file; the error says it all."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)


# ---------------------------------------------------------------- export

class _StateAsInputs(torch.nn.Module):
    """Calls `model` with its parameters and buffers passed as leading inputs."""

    def __init__(self, model: torch.nn.Module, names: list[str], source: ModelSource):
        super().__init__()
        object.__setattr__(self, "_model", model)  # not a submodule: nothing to lift
        self._names, self._source = names, source

    def forward(self, *flat):
        count = len(self._names)
        state = dict(zip(self._names, flat[:count]))
        return torch.func.functional_call(self._model, state, tuple(self._source.call_arguments(flat[count:])))


class _WithScalars(torch.nn.Module):
    """Calls `model` with the source's scalar arguments put back in place (a frozen compile)."""

    def __init__(self, source: ModelSource):
        super().__init__()
        self.model, self._source = source.module, source

    def forward(self, *tensors):
        return self.model(*self._source.call_arguments(tensors))


def model_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters then buffers, in a stable order: the leading arguments."""
    state = {name: p.detach() for name, p in module.named_parameters()}
    state.update({name: b.detach() for name, b in module.named_buffers()})
    return state


def export_model(source: ModelSource, freeze: bool = False, checks: bool = True) -> ExportedModel:
    """torch.export with the frontend's decompositions, its calling
    convention, and (with `checks`) the run-time guards of fx_passes/guards.py: on by
    default, and for the CPU; the GPU takes them with --check-indices."""
    from .composite_ops import fast_composite_ops
    with fast_composite_ops():
        return _export_model(source, freeze, checks)


def _export_model(source: ModelSource, freeze: bool, checks: bool) -> ExportedModel:
    state = model_state(source.module)
    state_kind = {name: "parameter" for name, _ in source.module.named_parameters()}
    dims = export_dims(source.dynamic, len(source.example_inputs))
    if freeze:
        target, args = (_WithScalars(source) if source.scalars else source.module), source.example_inputs
        dynamic_shapes = (tuple(dims),) if source.scalars else tuple(dims)
    else:
        target, args = _StateAsInputs(source.module, list(state), source), tuple(state.values()) + source.example_inputs
        dynamic_shapes = ((None,) * len(state) + tuple(dims),)
    program = _export(target, args, source.spec, dynamic_shapes if source.dynamic else None,
                      first_input=len(args) - len(source.example_inputs))
    inputs = _input_values(program, len(source.example_inputs))  # the passes below keep the placeholders
    names = ShapeNames(source.dynamic, inputs)
    report = FxReport(source.spec, checks)
    program = run_pipeline(program, report)
    # a complex input is taken as its real pair (complex_pairs.complex_inputs_as_pairs)
    inputs = [pair if x.is_complex() else x for x, pair in zip(inputs, _input_values(program, len(inputs)))]
    orders = report.calling.storage_orders  # by argument: the state (unless frozen), then the inputs
    result_orders = report.calling.result_storage_orders()
    first_input = 0 if freeze else len(state)
    return ExportedModel(
        program=program,
        state=[TensorSpec.of(n, torch.view_as_real(t) if t.is_complex() else t, state_kind.get(n, "buffer"),
                             storage_order=None if freeze else orders.get(position))
               for position, (n, t) in enumerate(state.items())],
        inputs=[TensorSpec.of(f"input{i}", x, "input", names.shape(x), orders.get(first_input + i))
                for i, x in enumerate(inputs)],
        outputs=[_result_spec(i, y, names, result_orders.get(i))
                 for i, y in enumerate(_output_values(program))],
        frozen=freeze,
        calling=report.calling,
        scalars=dict(source.scalars),
        dynamic=list(source.dynamic),
        state_inputs=tuple(source.state_inputs),
    )


def _result_spec(position: int, value: torch.Tensor, names: ShapeNames, order: tuple[int, ...] | None) -> TensorSpec:
    """The spec of a result, in the module's order where the function returns it in storage order."""
    if order is None:
        return TensorSpec.of(f"output{position}", value, "output", names.shape(value))
    return TensorSpec.of(f"output{position}", value, "output", shape_in_module_order(tuple(value.shape), order), order)


def _input_values(program: torch.export.ExportedProgram, count: int) -> list[torch.Tensor]:
    """The (fake) tensors of the program's last `count` user inputs: the model's inputs."""
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    names = program.graph_signature.user_inputs[-count:] if count else []
    return [placeholders[name].meta["val"] for name in names]


def _export(target: torch.nn.Module, args: tuple, spec: str, dynamic_shapes=None,
            first_input: int = 0) -> torch.export.ExportedProgram:
    """torch.export, then the frontend's decompositions. A failure of the
    first is the model's; of the second, twintrack's, and named so."""
    traced = _trace(target, args, spec, dynamic_shapes, first_input)
    prims_views_as_aten(traced.graph_module)  # run_decompositions refuses them
    with phase("decompositions"), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            return traced.run_decompositions(program_table(traced))
        except TwintrackError:
            raise  # a decomposition's own refusal, which names the op and its line
        except Exception as e:
            raise CompilerError("decompositions", [f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"]) from e


def _trace(target: torch.nn.Module, args: tuple, spec: str, dynamic_shapes=None,
           first_input: int = 0) -> torch.export.ExportedProgram:
    """torch.export, non-strict first, then strict: each takes programs the
    other refuses (strict traces `.item()` and int arithmetic through
    Dynamo)."""
    errors = []
    for strict in (False, True):
        try:
            with phase("torch.export"), warnings.catch_warnings(), _quiet_logger("torch._dynamo"), \
                    _quiet_logger("torch._guards"), _quiet_logger("torch.export"), \
                    _quiet_logger("torch.fx.experimental.symbolic_shapes"), torch.no_grad(), \
                    contextlib.redirect_stderr(io.StringIO()):  # torch prints the partial graph of a failed try
                warnings.simplefilter("ignore")
                return torch.export.export(target, args, strict=strict, dynamic_shapes=dynamic_shapes)
        except Exception as e:  # torch raises many types here; each is the model's problem
            if dynamic_shapes is not None and "Constraints violated" in str(e):
                raise UsageError(f"{spec}: --dynamic disagrees with the model: {_violations(e, first_input)}") from None
            errors.append(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    raise ModelLoadError(f"{spec}: torch.export failed: {errors[0]}"
                         + (f" (strict export: {errors[1][:120]})" if errors[1] != errors[0] else ""))


def _violations(error: Exception, first_input: int) -> str:
    """torch.export's constraint violations and suggested fixes, the model's
    arguments named as its inputs (inputN) instead of the export's flat list."""
    lines = [line.strip() for line in str(error).splitlines()]
    kept = [line.removeprefix("- ").split(" If you're using")[0] for line in lines if line.startswith("- ")]
    fixes = lines.index("Suggested fixes:") if "Suggested fixes:" in lines else None
    if fixes is not None:
        kept.append("suggested fixes: " + "; ".join(line for line in lines[fixes + 1:] if line and "=" in line))
    text = " ".join(kept) or " ".join(str(error).split())[:300]
    return re.sub(r"L\['flat(?:_args)?'\]\[(\d+)\]", lambda m: f"input{int(m[1]) - first_input}", text)


def _output_values(program: torch.export.ExportedProgram) -> list:
    """The outputs' (fake) tensors as traced: shapes and dtypes without running the model."""
    output = next(n for n in program.graph.nodes if n.op == "output")
    return [node.meta["val"] for node in pytree.tree_leaves(output.args[0])]


def import_to_torch_mlir(exported: ExportedModel):
    """torch-mlir's FxImporter: ExportedProgram -> raw torch-dialect module
    (as torch_mlir.fx.export_and_import imports a program, with no
    decomposition run: the frontend's table holds torch-mlir's)."""
    from ..bindings import new_context
    context = new_context("torch_mlir")  # fixes the load order of the two MLIRs
    from torch_mlir.extras.fx_importer import FxImporter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            importer = FxImporter(context=context)
            importer.import_frozen_program(exported.program, func_name="forward")
            _mark_state_arguments(importer.module, exported.state_arguments())
            if exported.dynamic:
                mark_dynamic_entry(importer.module, exported.arguments, exported.dynamic)
            return importer.module
        except Exception as e:
            from ..errors import CompilerError
            raise CompilerError("torch", [f"torch-mlir import failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"]) from e


def _mark_state_arguments(module, arguments: list[int]) -> None:
    """The entry's arguments that hold the model's state, for parameter-prologue."""
    from torch_mlir import ir
    from ..dialect import STATE_ARGUMENTS_ATTR
    with module.context:
        entry = next(op for op in module.body.operations if op.operation.name == "func.func")
        entry.operation.attributes[STATE_ARGUMENTS_ATTR] = ir.DenseI64ArrayAttr.get(arguments)

