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
import functools
import importlib
import importlib.util
import inspect
import json
import math
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from .bounded_outputs import bound_data_dependent_results
from .calling import CallingConvention, functional_results
from .complex_pairs import carry_complex_as_pairs
from .errors import CompilerError, ModelLoadError, TwintrackError, user_code
from .eager_semantics import convert_unsigned_operands, fold_zero_size_values, refuse_unsupported
from .guards import add_guards
from .locations import OP_FRAME_PREFIX
from .phases import phase


@dataclass
class ModelSource:
    spec: str
    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]   # the tensor arguments
    scalars: dict[int, object] = field(default_factory=dict)  # position -> a Python scalar argument, baked in

    def call_arguments(self, tensors) -> list:
        """The module's positional arguments: `tensors` with the scalars put back in place."""
        tensors, arguments = iter(tensors), []
        for position in range(len(self.example_inputs) + len(self.scalars)):
            arguments.append(self.scalars[position] if position in self.scalars else next(tensors))
        return arguments


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str          # torch dtype name without the 'torch.' prefix
    kind: str           # 'parameter', 'buffer', 'input' or 'output'

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "kind": self.kind}

    @staticmethod
    def of(name: str, tensor: torch.Tensor, kind: str) -> "TensorSpec":
        return TensorSpec(name, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), kind)


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

    @property
    def arguments(self) -> list[TensorSpec]:
        return ([] if self.frozen else self.state) + self.inputs

    def fx_text(self) -> str:
        return self.program.graph_module.print_readable(print_output=False)

    def fingerprint(self) -> str:
        """Everything of this program a compile reads, as a key: the graph
        with shapes, dtypes and strides, each op's source lines (kernel
        reports and diagnostics name them), the constants' values, the
        signature and the calling convention."""
        from .compile_cache import digest
        graph = self.program.graph_module.print_readable(print_output=False, include_stride=True, include_device=True)
        traces = [node.meta.get("stack_trace") or "" for node in self.program.graph.nodes]
        tensors = {**self.program.state_dict, **self.program.constants}
        values = [f"{name}:{_tensor_digest(tensors[name])}" for name in sorted(tensors)
                  if isinstance(tensors[name], torch.Tensor)]
        specs = [spec.to_json() for spec in self.state + self.inputs + self.outputs]
        return digest(graph, *traces, *values, str(self.program.graph_signature), repr(self.frozen),
                      json.dumps([specs, sorted(self.scalars.items()), self.calling.to_json()], default=str))


def _tensor_digest(tensor: torch.Tensor) -> str:
    """A digest of a tensor's dtype, shape and values (any dtype, any layout)."""
    from .compile_cache import digest
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
    return ModelSource(source.spec, source.module.to(target), inputs)


def _load(spec: str) -> ModelSource:
    if spec.startswith("zoo:"):
        from . import zoo
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
    from .zoo import integer_parameters
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


def _decompositions(program: torch.export.ExportedProgram):
    """The frontend's table (_base_decompositions), plus attention in its
    own dtype where that is safe for this program (_attention_in_its_dtype)."""
    with phase("decomposition table (once per process)"):
        table = dict(_base_decompositions())
    layout = _attention_layout(program)
    if layout is not None:
        table[torch.ops.aten.scaled_dot_product_attention.default] = functools.partial(_attention_in_its_dtype, layout)
    return table


@functools.cache
def _base_decompositions() -> dict:
    """The core ATen table, plus ops whose torch-mlir lowering is inexact,
    the providers' ops (scans, sorts, scatters, eager's NaN and dtype
    semantics, views, special functions, dense linear algebra, indexing,
    random ops), and
    torch-mlir's own table for ops none of these name, so that its
    importer needs no second decomposition run (import_to_torch_mlir), and
    last PyTorch's full table for ops torch-mlir has no op for. Built
    once per process: materializing the core table alone takes 0.4 s.

    aten.gelu(approximate='tanh'): torch-mlir uses 0.797724 for sqrt(2/pi)
    (0.7978846), a 1e-5 relative error; PyTorch's own decomposition is exact.
    aten.elu (and selu, celu through it): torch-mlir computes exp(x) - 1,
    which cancels near 0 (1% off at -1e-6); PyTorch's reads expm1.
    aten.native_layer_norm: see _layer_norm_in_float32.
    Reductions over float16/bfloat16 (sum, mean, var, std, norms, prod):
    accumulated in float32, as eager does (decompositions.py).
    """
    from torch._decomp import decomposition_table
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    from . import (decompose_indexing, decompose_linalg, decompose_random, decompose_scans, decompose_scatters,
                   decompose_sorts, decompose_special, decompose_views, eager_semantics)
    from .decompositions import with_half_reductions_in_float32
    table = with_half_reductions_in_float32(torch.export.default_decompositions())
    table[torch.ops.aten.gelu.default] = decomposition_table[torch.ops.aten.gelu.default]
    table[torch.ops.aten.elu.default] = decomposition_table[torch.ops.aten.elu.default]
    table[torch.ops.aten.native_layer_norm.default] = _layer_norm_in_float32
    for provider in (decompose_scans, decompose_sorts, decompose_scatters, eager_semantics, decompose_views,
                     decompose_special, decompose_linalg, decompose_indexing, decompose_random):
        table.update(provider.decompositions(table))
    for op, decomposition in get_decomposition_table().items():
        table.setdefault(op, decomposition)
    table.update(_decompositions_of_unknown_ops(table))
    return table


def _decompositions_of_unknown_ops(table: dict) -> dict:
    """PyTorch's own decomposition (its full table, not only the core-ATen
    one) of every op that torch-mlir has no op for and nothing above
    decomposes: torch-mlir would import it as an opaque `torch.operator`,
    which no stage lowers (addmv, std_mean, logsumexp, block_diag, the
    random distributions, ...). Whether the decomposition then lowers is
    up to its own ops; the op could not have lowered as it was. An entry
    of ours that declines (std_mean over float32) falls back to it."""
    from torch._decomp import decomposition_table

    from .decompositions import falling_back
    from .bindings import new_context
    torch_dialect = new_context("torch_mlir")  # asks the dialect which ops it defines
    return {op: falling_back(table[op], decomposition) if op in table else decomposition
            for op, decomposition in decomposition_table.items()
            if isinstance(op, torch._ops.OpOverload)
            and not torch_dialect.is_registered_operation(_torch_mlir_name(op))}


def _torch_mlir_name(op: torch._ops.OpOverload) -> str:
    """The op name torch-mlir's importer gives `op` (aten::add.Tensor is torch.aten.add.Tensor)."""
    name = op._schema.name.replace("::", ".")
    return f"torch.{name}.{op._schema.overload_name}" if op._schema.overload_name else f"torch.{name}"


def _layer_norm_in_float32(input, normalized_shape, weight, bias, eps):
    """Layer norm with its statistics in float32 (half-precision inputs
    widened), as PyTorch's own kernels compute them. torch-mlir's lowering
    computes the variance in float64 and the mean twice (once per
    precision): three reductions per row, and f64 arithmetic in the row
    kernel's registers. Here: the mean, then the mean square of the centered
    row. (mean and rstd, rarely used, come back in the input's dtype, as
    PyTorch's CPU kernel returns them.)"""
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input  # float64 stays float64
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    rstd = torch.rsqrt((centered * centered).mean(dims, keepdim=True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(input.dtype), mean.to(input.dtype), rstd.to(input.dtype)


def _attention_layout(program: torch.export.ExportedProgram) -> tuple[int, ...] | None:
    """The memory order (outermost dimension first) that every attention call of
    the program returns, if they agree and none uses dropout; else None. The
    ops after an attention call were traced against that layout (a `view`
    of its transpose), so its decomposition must keep it: PyTorch's own
    returns another, and those views then fail on retrace (GPT-2)."""
    orders = set()
    for node in program.graph.nodes:
        if node.target is not torch.ops.aten.scaled_dot_product_attention.default:
            continue
        options = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"), node.args[3:]), **node.kwargs)
        if options.get("dropout_p", 0.0) != 0.0:
            return None
        strides = node.meta["val"].stride()
        orders.add(tuple(sorted(range(len(strides)), key=lambda d: -strides[d])))
    return orders.pop() if len(orders) == 1 else None


def _attention_in_its_dtype(layout, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                            enable_gqa=False):
    """scaled_dot_product_attention (no dropout) as two matmuls and a softmax
    in the inputs' dtype, its result in `layout` (the memory order PyTorch's
    kernel returned when the model was traced). PyTorch's own decomposition
    (its CPU math path) computes half-precision attention in float32: the
    score matrix, the largest tensor of a transformer, would take twice the
    memory, and the matmuls could not use fp16 tensor cores. The matmul
    kernels accumulate in f32, and the softmax computes in f32 internally
    (torch-mlir widens it). A boolean mask keeps the scores where it is
    true; another is added to them. With grouped heads (enable_gqa) each
    key/value head serves query heads / key heads consecutive query heads."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
        value = value.repeat_interleave(query.shape[-3] // value.shape[-3], dim=-3)
    scores = (query * scale) @ key.transpose(-2, -1)
    if is_causal:
        rows, cols = scores.shape[-2], scores.shape[-1]
        attn_mask = torch.ones(rows, cols, dtype=torch.bool, device=scores.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    output = torch.softmax(scores, dim=-1) @ value
    inverse = sorted(range(len(layout)), key=lambda d: layout[d])
    return output.permute(layout).contiguous().permute(inverse)


def export_model(source: ModelSource, freeze: bool = False, checks: bool = True) -> ExportedModel:
    """torch.export with the frontend's decompositions, its calling
    convention, and (with `checks`) the run-time guards of guards.py: on by
    default, and for the CPU; the GPU takes them with --check-indices."""
    from .composite_ops import fast_composite_ops
    with fast_composite_ops():
        return _export_model(source, freeze, checks)


def _export_model(source: ModelSource, freeze: bool, checks: bool) -> ExportedModel:
    state = model_state(source.module)
    state_kind = {name: "parameter" for name, _ in source.module.named_parameters()}
    if freeze:
        target, args = (_WithScalars(source) if source.scalars else source.module), source.example_inputs
    else:
        target, args = _StateAsInputs(source.module, list(state), source), tuple(state.values()) + source.example_inputs
    program = _export(target, args, source.spec)
    with phase("fx: fold zero-size values"):
        fold_zero_size_values(program)
    with phase("fx: complex as pairs"):
        complex_outputs = carry_complex_as_pairs(program, _base_decompositions())
    with phase("fx: bound data-dependent results"):
        lengths = bound_data_dependent_results(program, _base_decompositions())
    with phase("fx: refuse unsupported"):
        refuse_unsupported(program)
    with phase("fx: unsigned operands"):
        convert_unsigned_operands(program)
    with phase("fx: guards"):
        violations = add_guards(program) if checks else []
    with phase("fx: name ops"):
        _name_ops_in_locations(program)
    with phase("fx: bfloat16 constants"):
        _bfloat16_constants_as_float32(program)
    with phase("fx: tensor metadata"):
        _refresh_tensor_metadata(program)
    with phase("fx: calling convention"):
        calling = functional_results(program, source.spec, violations, complex_outputs, lengths)
    return ExportedModel(
        program=program,
        state=[TensorSpec.of(n, t, state_kind.get(n, "buffer")) for n, t in state.items()],
        inputs=[TensorSpec.of(f"input{i}", x, "input") for i, x in enumerate(source.example_inputs)],
        outputs=[TensorSpec.of(f"output{i}", y, "output") for i, y in enumerate(_output_values(program))],
        frozen=freeze,
        calling=calling,
        scalars=dict(source.scalars),
    )


def _export(target: torch.nn.Module, args: tuple, spec: str) -> torch.export.ExportedProgram:
    """torch.export, then the frontend's decompositions. A failure of the
    first is the model's; of the second, twintrack's, and named so."""
    traced = _trace(target, args, spec)
    with phase("decompositions"), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            return traced.run_decompositions(_decompositions(traced))
        except TwintrackError:
            raise  # a decomposition's own refusal, which names the op and its line
        except Exception as e:
            raise CompilerError("decompositions", [f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"]) from e


def _trace(target: torch.nn.Module, args: tuple, spec: str) -> torch.export.ExportedProgram:
    """torch.export, non-strict first, then strict: each takes programs the
    other refuses (strict traces `.item()` and int arithmetic through
    Dynamo)."""
    errors = []
    for strict in (False, True):
        try:
            with phase("torch.export"), warnings.catch_warnings(), \
                    _quiet_logger("torch._dynamo"), _quiet_logger("torch.export"), torch.no_grad():
                warnings.simplefilter("ignore")
                return torch.export.export(target, args, strict=strict)
        except Exception as e:  # torch raises many types here; each is the model's problem
            errors.append(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    raise ModelLoadError(f"{spec}: torch.export failed: {errors[0]}"
                         + (f" (strict export: {errors[1][:120]})" if errors[1] != errors[0] else ""))


def _name_ops_in_locations(program: torch.export.ExportedProgram) -> None:
    """Add each node's ATen op to its stack trace as an innermost frame, so the
    locations torch-mlir builds from it read `aten.addmm at linear.py:134`
    in diagnostics and kernel reports (see locations.short_location). A node
    that a decomposition made is named after the op it came from (the
    aten.mean of a layer norm reads aten.native_layer_norm): the op the
    model wrote."""
    for node in program.graph.nodes:
        target = node.meta.get("original_aten") or node.target
        if node.op == "call_function" and hasattr(target, "name"):
            op = target.name().removeprefix("aten::").split(".")[0]
            trace = node.meta.get("stack_trace") or ""
            node.meta["stack_trace"] = f'{trace}\n  File "{OP_FRAME_PREFIX}{op}", line 0, in <op>'


def _bfloat16_constants_as_float32(program: torch.export.ExportedProgram) -> None:
    """torch-mlir's importer writes a constant (a lifted tensor, a frozen
    weight) through NumPy, which has no bfloat16: each bfloat16 constant is
    stored as its float32 value (exact) and converted back in the graph."""
    from torch.export.graph_signature import InputKind
    constant_kinds = (InputKind.CONSTANT_TENSOR, InputKind.PARAMETER, InputKind.BUFFER)
    by_name = {spec.arg.name: spec for spec in program.graph_signature.input_specs if spec.kind in constant_kinds}
    graph = program.graph
    for node in list(graph.nodes):
        spec = by_name.get(node.name) if node.op == "placeholder" else None
        if spec is None:
            continue
        store = program.constants if spec.target in program.constants else program.state_dict
        stored = store.get(spec.target)
        if stored is None or stored.dtype != torch.bfloat16:
            continue
        value = stored.detach().float()
        store[spec.target] = torch.nn.Parameter(value, requires_grad=False) if isinstance(stored, torch.nn.Parameter) \
            else value
        narrow = node.meta["val"]
        node.meta["val"] = narrow.float()
        with graph.inserting_after(node):
            cast = graph.call_function(torch.ops.aten._to_copy.default, (node,), {"dtype": torch.bfloat16})
        cast.meta.update(val=narrow, stack_trace=node.meta.get("stack_trace"))
        node.replace_all_uses_with(cast, delete_user_cb=lambda user: user is not cast)


def _refresh_tensor_metadata(program: torch.export.ExportedProgram) -> None:
    """torch-mlir's importer types a value by its `tensor_meta` before its
    `val`; the rewrites above update `val` only (a bounded result's rows
    become static), so a stale `tensor_meta` would import as a dynamic
    dimension that the torch stage no longer refines."""
    from torch.fx.passes.shape_prop import _extract_tensor_metadata
    for node in program.graph.nodes:
        value, meta = node.meta.get("val"), node.meta.get("tensor_meta")
        if isinstance(value, torch.Tensor) and meta is not None and _described(meta) != _described(value):
            node.meta["tensor_meta"] = _extract_tensor_metadata(value)


def _described(tensor) -> tuple[str, str]:
    """Shape and dtype as text: comparing a symbolic size would guard on it."""
    return str(getattr(tensor, "shape", None)), str(getattr(tensor, "dtype", None))


def _output_values(program: torch.export.ExportedProgram) -> list:
    """The outputs' (fake) tensors as traced: shapes and dtypes without running the model."""
    output = next(n for n in program.graph.nodes if n.op == "output")
    return [node.meta["val"] for node in pytree.tree_leaves(output.args[0])]


def import_to_torch_mlir(exported: ExportedModel):
    """torch-mlir's FxImporter: ExportedProgram -> raw torch-dialect module
    (as torch_mlir.fx.export_and_import imports a program, with no
    decomposition run: the frontend's table holds torch-mlir's)."""
    from .bindings import new_context
    context = new_context("torch_mlir")  # fixes the load order of the two MLIRs
    from torch_mlir.extras.fx_importer import FxImporter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            importer = FxImporter(context=context)
            importer.import_frozen_program(exported.program, func_name="forward")
            return importer.module
        except Exception as e:
            from .errors import CompilerError
            raise CompilerError("torch", [f"torch-mlir import failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"]) from e
