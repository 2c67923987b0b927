"""Host plan: the host function of a GPU compilation, turned into data.

After kernel outlining, the host function only allocates and frees buffers,
takes views of them, copies and launches kernels. Those steps are recorded in
plan.json, which twintrack.runtime executes with torch tensors and the CUDA
driver API, so the GPU machine needs no MLIR at all. A launch that runs
another module's kernel (a repeated layer: share-kernel-modules) names that
module as its `binary`, and keeps its own name as `module`.

With dynamic shapes (version 2), the sizes a compile left open are
`symbols`, each read at a call from an input's dim; the host function's
size arithmetic (memref.dim, index arithmetic, the grids gpu-distribute
computes) becomes `lets`, evaluated in order; and any integer of a step (a
size, a stride, an offset, a grid, a scalar argument) may name one. The
runtime resolves the plan once per set of sizes (runtime/plan.py)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompilerError
from ..locations import short_location
from .passes.ir_helpers import kernel_ref
from .resource_blobs import blob_array, resource_blobs, resource_key
from .passes.share_kernel_modules import KERNEL_NAME_ATTR
from .kernels.tensor_maps import IM2COL_ATTRIBUTE
from ..dialect import KEPT_ATTR, KEPT_ROOTS_ATTR
from ..runtime.plan import buffers_touched, depends_on_sizes

PLAN_VERSION = 1
DYNAMIC_PLAN_VERSION = 2

_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
           "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "index": "int64"}
_VIEW_OPS = {"memref.expand_shape", "memref.collapse_shape", "memref.subview", "memref.cast",
             "memref.reinterpret_cast"}
_IGNORED = {"arith.constant", "func.return"}


@dataclass
class Plan:
    arguments: list[dict]
    steps: list[dict] = field(default_factory=list)
    symbols: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (argument, dim)
    lets: list[tuple[str, str]] = field(default_factory=list)          # (name, expression), in order

    def launches(self) -> list[dict]:
        return [s for s in self.steps if s["op"] == "launch"]

    def to_json(self) -> dict:
        if not self.symbols:
            return {"version": PLAN_VERSION, "arguments": self.arguments, "steps": self.steps}
        return {"version": DYNAMIC_PLAN_VERSION, "arguments": self.arguments,
                "symbols": {name: list(where) for name, where in self.symbols.items()},
                "lets": [list(let) for let in self.lets], "steps": self.steps}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")


def _im2col_spec(attribute) -> dict:
    """The im2col part of a tensor map (kernels/tensor_maps.im2col_tensor_map), outermost first."""
    return {"lower": _integers(attribute["lower"]), "upper": _integers(attribute["upper"]),
            "element_strides": _integers(attribute["element_strides"]),
            "channels": attribute["channels"].value, "pixels": attribute["pixels"].value}


def dtype_name(element_type) -> str:
    return _DTYPES.get(str(element_type), str(element_type))


Size = int | str  # a number, or the name of a symbol or let (dynamic shapes)

# Integer ops of the host function -> their expression (dynamic_shapes' functions).
_INFIX = {"arith.addi": "+", "arith.subi": "-", "arith.muli": "*", "arith.divui": "//", "arith.remui": "%",
          "arith.floordivsi": "//"}
_CALLS = {"arith.divsi": "tdiv", "arith.remsi": "trem", "arith.ceildivsi": "ceildiv", "arith.ceildivui": "ceildiv",
          "arith.maxui": "max", "arith.maxsi": "max", "arith.minui": "min", "arith.minsi": "min",
          "arith.select": "select"}
_PREDICATES = ["eq", "ne", "lt", "le", "gt", "ge", "ult", "ule", "ugt", "uge"]  # arith.cmpi's order
_CASTS = {"arith.index_cast", "arith.index_castui"}


class SizeArithmetic:
    """The plan's integer arithmetic on sizes: numbers where every operand
    is one, else a new `let` named _sN (the expression over its operands'
    names), so that each expression stays short."""

    def __init__(self, plan: Plan):
        self.plan = plan

    def let(self, expression: str) -> str:
        name = f"_s{len(self.plan.lets)}"
        self.plan.lets.append((name, expression))
        return name

    def apply(self, op_name: str, operands: list[Size], predicate: int | None = None) -> Size:
        if op_name in _CASTS:
            return operands[0]
        operands = [_operand(x) for x in operands]
        if op_name == "arith.cmpi":
            function, arguments = _PREDICATES[predicate], operands
        elif op_name in _INFIX:
            a, b = operands
            if isinstance(a, int) and isinstance(b, int):
                return _evaluate(f"({a}) {_INFIX[op_name]} ({b})")
            return self.let(f"{a} {_INFIX[op_name]} {b}")
        else:
            function, arguments = _CALLS[op_name], operands
        text = f"{function}({', '.join(map(str, arguments))})"
        return _evaluate(text) if all(isinstance(a, int) for a in operands) else self.let(text)

    def product(self, sizes: list[Size]) -> Size:
        result: Size = 1
        for size in sizes:
            result = size if result == 1 else (result if size == 1 else self.apply("arith.muli", [result, size]))
        return result

    def row_major(self, shape: list[Size]) -> list[Size]:
        strides = [1] * len(shape)
        for k in reversed(range(len(shape) - 1)):
            strides[k] = self.product([strides[k + 1], shape[k + 1]])
        return strides


def _operand(size: Size) -> Size:
    """A size as an operand of a longer expression: an expression in parentheses."""
    return size if isinstance(size, int) or size.isidentifier() else f"({size})"


def _evaluate(text: str) -> int:
    from ..dynamic_shapes import concrete_shape
    return concrete_shape((text,), {})[0]


def _row_major(shape: list[int]) -> list[int]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= size
    return list(reversed(strides))


class _PlanBuilder:
    def __init__(self, module, exported, directory: Path):
        from mlir import ir
        self.ir, self.module, self.directory = ir, module, directory
        self.views: dict = {}     # SSA value -> view descriptor
        self.scalars: dict = {}   # SSA value -> python number
        self.tensor_maps: dict = {}  # SSA value -> a launch argument passed as a tensor map
        self.globals = {op.operation.attributes["sym_name"].value: op.operation
                        for op in module.body.operations if op.operation.name == "memref.global"}
        self.plan = Plan(arguments=[s.stored().to_json() for s in exported.arguments + exported.outputs])
        for position in exported.state_arguments():  # inputs holding state too: once steps may read them
            if self.plan.arguments[position]["kind"] == "input":
                self.plan.arguments[position]["state"] = True
        self.plan.symbols = _symbols(self.plan.arguments)
        self.sizes = SizeArithmetic(self.plan)
        self.buffer_count = 0

    # -- values
    @staticmethod
    def _key(value):
        return value  # ir.Value hashes by identity of the SSA value

    def _memref_view(self, buffer: str, memref_type) -> dict:
        strides, offset = memref_type.get_strides_and_offset()
        return {"buffer": buffer, "offset": offset, "sizes": list(memref_type.shape), "strides": list(strides)}

    def _argument_view(self, argument) -> dict:
        """An argument's view: its type's, or, where its sizes are open,
        its spec's sizes (symbols and expressions of them), row-major."""
        memref_type = argument.type
        if memref_type.has_static_shape:
            return self._memref_view(f"arg{argument.arg_number}", memref_type)
        sizes = list(self.plan.arguments[argument.arg_number]["shape"])
        return {"buffer": f"arg{argument.arg_number}", "offset": 0, "sizes": sizes,
                "strides": self.sizes.row_major(sizes)}

    def _scalar(self, value) -> Size:
        return self.scalars[self._key(value)]

    def _derived_view(self, op) -> dict:
        """The view a view op makes: its result type's, with each size,
        stride or offset it leaves open computed from the source's view and
        the op's operands."""
        source = self.views[self._key(op.operands[0])]
        result_type = op.results[0].type
        if isinstance(result_type, self.ir.UnrankedMemRefType):  # a cast for a tensor map: the same view
            return source
        static_strides, static_offset = result_type.get_strides_and_offset()
        if result_type.has_static_shape and not any(map(_open, static_strides)) and not _open(static_offset):
            return self._memref_view(source["buffer"], result_type)
        offset, sizes, strides = _VIEW_RULES[op.name](self, op, source)
        return {"buffer": source["buffer"], "offset": _known(static_offset, offset),
                "sizes": [_known(a, b) for a, b in zip(result_type.shape, sizes)],
                "strides": [_known(a, b) for a, b in zip(static_strides, strides)]}

    def _mixed(self, op, static_name: str, operands: list) -> list[Size]:
        """A static_* array attribute with its open entries taken, in order, from `operands`."""
        given = iter(operands)
        return [self._scalar(next(given)) if _open(v) else v for v in _integers(op.attributes[static_name])]

    def _cast_view(self, op, source: dict):
        return source["offset"], list(source["sizes"]), list(source["strides"])

    def _collapse_view(self, op, source: dict):
        groups = _reassociation(op)
        sizes = [self.sizes.product([source["sizes"][d] for d in group]) for group in groups]
        return source["offset"], sizes, [source["strides"][group[-1]] for group in groups]

    def _expand_view(self, op, source: dict):
        sizes = self._mixed(op, "static_output_shape", list(op.operands)[1:])
        strides: list[Size] = [0] * len(sizes)
        for dim, group in enumerate(_reassociation(op)):
            running = source["strides"][dim]
            for position in reversed(group):
                strides[position] = running
                running = self.sizes.product([running, sizes[position]])
        return source["offset"], sizes, strides

    def _offsets_sizes_strides(self, op) -> tuple[list[Size], list[Size], list[Size]]:
        """A subview's or reinterpret_cast's offsets, sizes and strides: its
        static_* attributes with the open entries from its operands."""
        segments = _integers(op.attributes["operandSegmentSizes"])
        operands = list(op.operands)
        starts = [sum(segments[:k]) for k in range(len(segments))]
        return tuple(self._mixed(op, f"static_{name}", operands[starts[k]:starts[k] + segments[k]])
                     for k, name in ((1, "offsets"), (2, "sizes"), (3, "strides")))

    def _subview_view(self, op, source: dict):
        offsets, sizes, steps = self._offsets_sizes_strides(op)
        offset = source["offset"]
        for start, stride in zip(offsets, source["strides"]):
            offset = self.sizes.apply("arith.addi", [offset, self.sizes.product([start, stride])])
        strides = [self.sizes.product([step, stride]) for step, stride in zip(steps, source["strides"])]
        unit_dims = [k for k, size in enumerate(sizes) if size == 1]
        dropped = set(unit_dims[:len(sizes) - len(op.results[0].type.shape)])  # a rank-reducing subview's
        kept = [k for k in range(len(sizes)) if k not in dropped]
        return offset, [sizes[k] for k in kept], [strides[k] for k in kept]

    def _reinterpret_view(self, op, source: dict):
        offset, sizes, strides = self._offsets_sizes_strides(op)
        return offset[0], sizes, strides

    def _fail(self, op, message: str):
        raise CompilerError("plan", [f"{short_location(op.location)}: {message}"])

    # -- ops
    def build(self, func) -> Plan:
        block = func.regions[0].blocks[0]
        for argument in block.arguments:
            self.views[self._key(argument)] = self._argument_view(argument)
        for op in block.operations:
            self.step(op.operation)
        self.plan.steps = free_after_last_use(self.plan.steps)
        if KEPT_ROOTS_ATTR in func.attributes:
            roots = {f"arg{i}" for i in _integers(func.attributes[KEPT_ROOTS_ATTR])}
            self.plan.steps = mark_once_steps(self.plan.steps, roots)
        for step in self.plan.steps:
            step.pop("kept", None)
        return self.plan

    def step(self, op) -> None:
        name = op.name
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, (self.ir.IntegerAttr, self.ir.FloatAttr)):
                self.scalars[self._key(op.results[0])] = attr.value
        elif name == "memref.alloc" or name == "memref.alloca":
            self._alloc(op)
        elif name == "memref.get_global":
            self._constant(op)
        elif name in _VIEW_OPS:
            self.views[self._key(op.results[0])] = self._derived_view(op)
        elif name == "memref.dim":
            dim = self._scalar(op.operands[1])
            self.scalars[self._key(op.results[0])] = self.views[self._key(op.operands[0])]["sizes"][dim]
        elif name in _INFIX or name in _CALLS or name in _CASTS or name == "arith.cmpi":
            predicate = op.attributes["predicate"].value if name == "arith.cmpi" else None
            operands = [self._scalar(v) for v in op.operands]
            self.scalars[self._key(op.results[0])] = self.sizes.apply(name, operands, predicate)
        elif name == "memref.copy":
            self.plan.steps.append({"op": "copy", "src": self.views[self._key(op.operands[0])],
                                    "dst": self.views[self._key(op.operands[1])]})
        elif name == "memref.dealloc":
            self.plan.steps.append({"op": "free", "buffer": self.views[self._key(op.operands[0])]["buffer"]})
        elif name == "gpu.launch_func":
            self._launch(op)
        elif name == "nvgpu.tma.create.descriptor":
            self._tensor_map(op)
        elif name == "builtin.unrealized_conversion_cast" and self._key(op.operands[0]) in self.tensor_maps:
            self.tensor_maps[self._key(op.results[0])] = self.tensor_maps[self._key(op.operands[0])]
        elif name == "scf.if":
            self._branches(op)
        elif name not in _IGNORED:
            self._fail(op, f"host op '{name}' is not supported by the GPU runtime")

    def _branches(self, op) -> None:
        """An scf.if on sizes (a kernel per bucket of sizes): each branch's
        launches are steps taken `when` its condition holds at a call."""
        condition = self._scalar(op.operands[0])
        otherwise = self.sizes.apply("arith.cmpi", [condition, 0], _PREDICATES.index("eq"))
        for region, holds in zip(op.regions, (condition, otherwise)):
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    if child.name == "scf.yield":
                        continue
                    if child.name not in ("gpu.launch_func", "arith.constant", "scf.if", "memref.dim") \
                            and child.name not in _INFIX and child.name not in _CALLS and child.name not in _CASTS \
                            and child.name != "arith.cmpi":
                        self._fail(child, f"host op '{child.name}' in a branch: only launches and size "
                                          "arithmetic are taken by sizes")
                    before = len(self.plan.steps)
                    self.step(child)
                    for step in self.plan.steps[before:]:
                        step["when"] = holds if "when" not in step else \
                            self.sizes.apply("arith.minui", [step["when"], holds])

    def _tensor_map(self, op) -> None:
        """A TMA descriptor of a buffer (kernels/tensor_maps.tensor_map): an
        argument the runtime passes as the tensor map it encodes of that
        view, with this box (innermost last, as the view's sizes) and swizzle."""
        described = op.operands[0]
        swizzle = re.search(r"swizzle = swizzle_(\d+)b", str(op.results[0].type))
        spec = {"box": [self._scalar(v) for v in list(op.operands)[1:]],
                "swizzle": int(swizzle.group(1)) if swizzle else 0,
                "dtype": dtype_name(described.type.element_type)}
        if IM2COL_ATTRIBUTE in op.attributes:
            spec["im2col"] = _im2col_spec(op.attributes[IM2COL_ATTRIBUTE])
        self.tensor_maps[self._key(op.results[0])] = {"memref": self.views[self._key(described)], "tensor_map": spec}

    def _new_buffer(self) -> str:
        self.buffer_count += 1
        return f"b{self.buffer_count - 1}"

    def _alloc(self, op) -> None:
        memref_type = op.results[0].type
        buffer = self._new_buffer()
        if memref_type.has_static_shape:
            shape = list(memref_type.shape)
            view = self._memref_view(buffer, memref_type)
        else:
            open_sizes = iter(self._scalar(v) for v in op.operands)  # alloc's operands: its open sizes, in order
            shape = [next(open_sizes) if _open(size) else size for size in memref_type.shape]
            view = {"buffer": buffer, "offset": 0, "sizes": shape, "strides": self.sizes.row_major(shape)}
        self.plan.steps.append({"op": "alloc", "buffer": buffer, "shape": shape,
                                "dtype": dtype_name(memref_type.element_type),
                                **({"kept": True} if KEPT_ATTR in op.attributes else {})})
        self.views[self._key(op.results[0])] = view

    def _constant(self, op) -> None:
        import numpy as np
        symbol = op.attributes["name"].value
        initial = self.globals[symbol].attributes["initial_value"]
        memref_type = op.results[0].type
        array = self._constant_data(op, initial, dtype_name(memref_type.element_type))
        shape = tuple(memref_type.shape)
        if array.size == math.prod(shape):
            array = array.reshape(shape)
        elif array.size == 1:  # a splat
            array = np.broadcast_to(array.reshape(()), shape)
        else:
            self._fail(op, f"constant {symbol} holds {array.size} values for shape {list(shape)}")
        buffer = self._new_buffer()
        constants = self.directory / "constants"
        constants.mkdir(exist_ok=True)
        np.save(constants / f"{buffer}.npy", np.ascontiguousarray(array))
        self.plan.steps.append({"op": "constant", "buffer": buffer, "file": f"constants/{buffer}.npy",
                                "shape": list(memref_type.shape), "dtype": dtype_name(memref_type.element_type)})
        self.views[self._key(op.results[0])] = self._memref_view(buffer, memref_type)

    def _constant_data(self, op, initial, element: str):
        """A global's value as numpy: dense attributes directly, dense_resource
        blobs (how torch-mlir stores frozen weights) from the module's resources."""
        import numpy as np
        dtype = _numpy_dtype(element)
        key = resource_key(initial)
        if key is not None:
            blob = self._resources().get(key)
            if blob is None:
                self._fail(op, f"constant {key} has no data in the module")
            return blob_array(blob, dtype)
        if element == "bfloat16":  # the attribute's values are floats
            values = [initial.get_splat_value().value] if initial.is_splat else [a.value for a in initial]
            return _bfloat16_bits(values)
        if initial.is_splat:
            return np.array(initial.get_splat_value().value, dtype=dtype)
        return np.array([a.value for a in initial], dtype=dtype)

    def _resources(self) -> dict[str, bytes]:
        if not hasattr(self, "_blobs"):
            self._blobs = resource_blobs(self.module)
        return self._blobs

    def _launch(self, op) -> None:
        view = op.opview
        attrs = op.attributes
        module_name, kernel_name = kernel_ref(op)
        args = []
        for value in view.kernelOperands:
            key = self._key(value)
            if key in self.tensor_maps:
                args.append(self.tensor_maps[key])
            elif key in self.views:
                args.append({"memref": self.views[key]})
            elif key in self.scalars:
                args.append({"scalar": self.scalars[key], "type": str(value.type)})  # a number or a size's name
            else:
                self._fail(op, f"kernel argument {key} is neither a buffer nor a constant")
        dims = [self.scalars[self._key(v)] for v in (view.gridSizeX, view.gridSizeY, view.gridSizeZ,
                                                      view.blockSizeX, view.blockSizeY, view.blockSizeZ)]
        shared = view.dynamicSharedMemorySize
        own_name = attrs[KERNEL_NAME_ATTR].value if KERNEL_NAME_ATTR in attrs else module_name
        self.plan.steps.append({
            "op": "launch", "module": own_name, "kernel": kernel_name,
            **({"binary": module_name} if own_name != module_name else {}),
            "grid": dims[:3], "block": dims[3:],
            "dynamic_shared_bytes": self.scalars[self._key(shared)] if shared is not None else 0,
            "args": args,
            "source_ops": _strings(attrs, "twintrack.source_ops"),
            "source_keys": _strings(attrs, "twintrack.source_keys"),
            "flops": attrs["twintrack.flops"].value if "twintrack.flops" in attrs else None,
            "bytes": attrs["twintrack.bytes"].value if "twintrack.bytes" in attrs else None,
            "path": attrs["twintrack.path"].value if "twintrack.path" in attrs else "generic",
        })


_VIEW_RULES = {"memref.cast": _PlanBuilder._cast_view, "memref.collapse_shape": _PlanBuilder._collapse_view,
               "memref.expand_shape": _PlanBuilder._expand_view, "memref.subview": _PlanBuilder._subview_view,
               "memref.reinterpret_cast": _PlanBuilder._reinterpret_view}


def _open(size: int) -> bool:
    """Is this a size, stride or offset MLIR leaves to run time?"""
    from mlir import ir
    return ir.ShapedType.is_dynamic_size(size)


def _known(static: int, computed: Size) -> Size:
    """The type's own value where it has one, else the one computed."""
    return computed if _open(static) else static


def _integers(attribute) -> list[int]:
    """The values of an `array<i64: ...>` (or i32) attribute."""
    text = str(attribute)
    return [int(v) for v in text.split(":", 1)[1].rstrip(">").split(",") if v.strip()] if ":" in text else []


def _reassociation(op) -> list[list[int]]:
    return [[int(d) for d in group] for group in json.loads(str(op.attributes["reassociation"]))]


def _symbols(arguments: list[dict]) -> dict[str, tuple[int, int]]:
    """Each size name the inputs' shapes hold, with the first (input, dim) holding it alone."""
    symbols = {}
    for index, argument in enumerate(arguments):
        if argument["kind"] == "output":
            continue
        for dim, size in enumerate(argument["shape"]):
            if isinstance(size, str) and size.isidentifier():
                symbols.setdefault(size, (index, dim))
    return symbols


def _strings(attrs, name: str) -> list[str]:
    return [s.value for s in attrs[name]] if name in attrs else []


def free_after_last_use(steps: list[dict]) -> list[dict]:
    """Each free moved up to right after the last step that uses its buffer.

    Ownership-based deallocation frees at the end of the function, which
    keeps every temporary live at once. Launches are stream-ordered and
    torch's caching allocator reuses a freed block only for later work on the
    same stream, so freeing right after the last launch that reads it is safe."""
    frees = {s["buffer"] for s in steps if s["op"] == "free"}
    last_use = {}
    for index, step in enumerate(steps):
        for buffer in ({step["buffer"]} if step["op"] in ("alloc", "constant") else buffers_touched(step)) & frees:
            last_use[buffer] = index
    freed_after: dict[int, list[str]] = {}
    for buffer in sorted(frees):
        freed_after.setdefault(last_use.get(buffer, len(steps) - 1), []).append(buffer)
    result = []
    for index, step in enumerate(steps):
        if step["op"] != "free":
            result.append(step)
        result += [{"op": "free", "buffer": b} for b in freed_after.get(index, ())]
    return result


def mark_once_steps(steps: list[dict], roots: set[str]) -> list[dict]:
    """The steps with those that depend on the state alone marked `once`.

    A buffer the parameter-prologue pass kept (an alloc step's `kept`) is
    written only by work on the state: a launch or copy touching only such
    buffers, the `roots` (the state arguments that work reads) and
    constants is a once step. A kept buffer stays one only while every once
    step touching it comes before every other step touching it (so running
    the once steps first, or not at all, changes nothing the others read);
    otherwise it is dropped, and the steps it made once are looked at again.
    A kept buffer the other steps read outlives the call (its free goes); one
    only once steps touch is freed among them. In a dynamic plan only steps
    whose sizes are numbers can be once (the same work at every call's sizes)."""
    kept = {s["buffer"] for s in steps if s["op"] == "alloc" and s.get("kept") and not depends_on_sizes(s)}
    sources = roots | {s["buffer"] for s in steps if s["op"] == "constant"}
    touching: dict[str, list[int]] = {}  # each kept buffer's launches and copies, in order
    for index, step in enumerate(steps):
        if step["op"] in ("launch", "copy"):
            for buffer in buffers_touched(step) & kept:
                touching.setdefault(buffer, []).append(index)
    while True:
        once = {i for i, s in enumerate(steps) if _touches_only(s, sources, kept)}
        dropped = {buffer for buffer in kept if not _once_first(touching.get(buffer, []), once)}
        if not dropped:
            break
        kept -= dropped
    read_later = {b for i, s in enumerate(steps) if i not in once for b in buffers_touched(s)} & kept
    marked = []
    for index, step in enumerate(steps):
        if step["op"] == "free" and step["buffer"] in read_later:
            continue  # kept across calls
        if index in once or (step["op"] in ("alloc", "free") and step["buffer"] in kept):
            step = {**step, "once": True}
        marked.append(step)
    return marked


def _touches_only(step: dict, sources: set[str], kept: set[str]) -> bool:
    """Is `step` a launch or copy, taken on every call, of the same sizes at
    every call, touching only `sources` and `kept` and some of the latter?"""
    if step["op"] not in ("launch", "copy") or "when" in step or depends_on_sizes(step):
        return False
    used = buffers_touched(step)
    return bool(used & kept) and used <= sources | kept


def _once_first(touching: list[int], once: set[int]) -> bool:
    """Do once steps touch the buffer (the steps `touching` it, in order), and all of them before any other does?"""
    ordered = [i in once for i in touching]  # once or not, step by step
    return any(ordered) and ordered == sorted(ordered, reverse=True)  # the once steps all come first


def extract_plan(module, exported, directory: Path) -> Plan:
    """The plan of the module's host function `forward`."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and op.operation.attributes["sym_name"].value == "forward":
            return _PlanBuilder(module, exported, directory).build(op.operation)
    raise CompilerError("plan", ["no host function 'forward' in the module"])


def _numpy_dtype(name: str):
    """The NumPy dtype a constant of element type `name` is saved as:
    NumPy has no bfloat16, so its 16-bit patterns go as uint16 (the runtime
    reinterprets them by the plan step's dtype)."""
    import numpy as np
    return np.dtype({"bfloat16": "uint16", "bool": "bool_"}.get(name, name))


def _bfloat16_bits(values: list[float]):
    """bfloat16 values (exact in float32) as their 16-bit patterns."""
    import numpy as np
    return (np.array(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
