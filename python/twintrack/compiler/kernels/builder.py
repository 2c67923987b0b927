"""Kernel IR built in place through the `mlir` Python bindings.

A generator builds its kernel as a `gpu.launch` right before the op it
replaces, reading that op's operands as typed `ir.Value`s (the launch region
is not isolated from above: outlining makes them the kernel's arguments).
`KernelBuilder` holds what every generator shares: the constants (built
once each, before the launch, so they dominate the whole body), index
arithmetic, guarded blocks and loops. Everything else is the dialects' own
op builders (`arith`, `scf`, `memref`, `vector`, `gpu`, `nvgpu`, `nvvm`,
`llvm`). Only inline PTX stays text, because PTX is text.

`build_launch` wraps a generator's work: any failure while building or
verifying the kernel becomes a `KernelBuildError` naming the kernel, its
schedule and the torch op it came from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import arith, gpu, scf, vector

from ..._twintrack_cpp import nvvm_mma_shape

KERNEL_PATH_ATTR = "twintrack.kernel_path"  # read by annotate-kernels for the kernel report
MEAN_TRIPS_ATTR = "twintrack.mean_trips"  # a loop's trips averaged over the blocks, where its bounds vary by block
USEFUL_ATTR = "twintrack.useful_fraction"  # the share of a loop's work inside the data (ragged edges pad the rest)
THEN_SHARE_ATTR = "twintrack.then_share"  # the share of the threads that take an scf.if's then side (the rest: else)
WGMMA_SHAPE_ATTR = "twintrack.wgmma_shape"  # on a wgmma written as PTX (A in registers): its m x n x k
BLOCKS_PER_SM_ATTR = "twintrack.blocks_per_sm"  # on an op of a kernel's body: the resident blocks it is built for
CLUSTER_BLOCKS_ATTR = "twintrack.cluster_blocks"  # on an op of a kernel's body: the blocks of its 1-d clusters

_ELEMENT_TYPES: dict[str, Callable[[], ir.Type]] = {
    "f64": ir.F64Type.get, "f32": ir.F32Type.get, "f16": ir.F16Type.get, "bf16": ir.BF16Type.get,
    "f8E4M3FN": ir.Float8E4M3FNType.get, "f8E5M2": ir.Float8E5M2Type.get,
    "index": ir.IndexType.get,
}


def element_type(name: str | ir.Type) -> ir.Type:
    """The scalar type named `name` (f32, bf16, i64, index), or `name` itself if it is one."""
    if isinstance(name, ir.Type):
        return name
    if name in _ELEMENT_TYPES:
        return _ELEMENT_TYPES[name]()
    if name.startswith("i") and name[1:].isdigit():
        return ir.IntegerType.get_signless(int(name[1:]))
    raise ValueError(f"not a scalar type this builder knows: {name}")


def vector_of(width: int, element: str | ir.Type) -> ir.VectorType:
    return ir.VectorType.get([width], element_type(element))


def workgroup_memref(shape: Sequence[int], element: str | ir.Type) -> ir.MemRefType:
    """A shared-memory (workgroup address space) buffer type."""
    return ir.MemRefType.get(list(shape), element_type(element),
                             memory_space=ir.Attribute.parse("#gpu.address_space<workgroup>"),
                             loc=ir.Location.unknown())


def mma_shape(m: int, n: int, k: int) -> ir.Attribute:
    """#nvvm.shape<m, n, k>, through twintrack's C API (the bindings have no builder for it)."""
    return nvvm_mma_shape(m, n, k)


def is_float(t: ir.Type) -> bool:
    return isinstance(t, (ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type))


class KernelBuildError(Exception):
    """A kernel generator failed to build or verify its kernel: a compiler bug."""

    def __init__(self, kernel: str, schedule: str, location: str, cause: BaseException | str):
        self.kernel, self.schedule, self.location, self.cause = kernel, schedule, location, cause
        super().__init__(f"kernel {kernel} ({schedule}) for {location}: {_first_problem(cause)}")


def _first_problem(cause: BaseException | str) -> str:
    """One line: the first diagnostic of a failed verification (the op and
    what is wrong with it), else the exception's message."""
    diagnostics = getattr(cause, "error_diagnostics", None)
    if diagnostics:
        first = diagnostics[0]
        notes = "; ".join(str(n.message) for n in first.notes)
        return f"{first.message} ({first.location})" + (f"; {notes}" if notes else "")
    text = " ".join(str(cause).split())
    return text or type(cause).__name__


@dataclass
class Loop:
    """An scf.for being built: its induction variable and carried values;
    `results` once its body yielded."""
    op: scf.ForOp
    yielded: list[ir.Value] = field(default_factory=list)

    @property
    def induction(self) -> ir.Value:
        return self.op.induction_variable

    @property
    def carried(self) -> list[ir.Value]:
        return list(self.op.inner_iter_args)

    @property
    def results(self) -> list[ir.Value]:
        return list(self.op.results)

    def yield_(self, values: Sequence[ir.Value]) -> None:
        self.yielded = list(values)


def _record_then_share(branch: scf.IfOp, then_share: float | None) -> None:
    """Mark an scf.if with the share of the threads taking its then side, where known (the kernel report reads it)."""
    if then_share is not None:
        branch.operation.attributes[THEN_SHARE_ATTR] = ir.FloatAttr.get(ir.F64Type.get(), float(then_share))


class KernelBuilder:
    """Shared state of one kernel being built: where its constants go, and
    the path recorded on its loops and barriers for the kernel report."""

    def __init__(self, constants_at: ir.InsertionPoint, path: str = ""):
        self.thread: ir.Value | None = None  # the thread's index in its block, once the launch exists
        self._constants_at = constants_at
        self._constants: dict[tuple, ir.Value] = {}
        self.path = path

    # ------------------------------------------------------------ constants
    def constant(self, value: int | float, type_: str | ir.Type) -> ir.Value:
        """`value` of `type_` (a scalar or a vector splat), built once, before the launch."""
        key = (type_, repr(value))  # a type's name or the type itself: both hash without printing the type
        if key not in self._constants:
            t = element_type(type_) if isinstance(type_, str) else type_
            with self._constants_at:
                self._constants[key] = arith.ConstantOp(t, _attribute(value, t)).result
        return self._constants[key]

    def index(self, value: int) -> ir.Value:
        return self.constant(value, "index")

    def index_of(self, size: ir.Value | int) -> ir.Value:
        """A size known at compile time (an index constant) or at run time (the value as it is)."""
        return self.index(size) if isinstance(size, int) else size

    def constant_of(self, op: ir.Operation) -> ir.Value:
        """An arith.constant of the source IR (an epilogue's, say), cloned once, before the launch."""
        key = (str(op.results[0].type), str(op.attributes["value"]))
        if key not in self._constants:
            self._constants[key] = op.clone(ip=self._constants_at).results[0]
        return self._constants[key]

    # ------------------------------------------------------------ index arithmetic
    def add(self, a: ir.Value, b: ir.Value | int) -> ir.Value:
        return arith.addi(a, self.index_of(b))

    def sub(self, a: ir.Value, b: ir.Value | int) -> ir.Value:
        return arith.subi(a, self.index_of(b))

    def mul(self, a: ir.Value, b: int) -> ir.Value:
        """a * b; nothing built for b == 1 (canonicalize folds the rest)."""
        return a if b == 1 else arith.muli(a, self.index(b))

    def div(self, a: ir.Value, b: ir.Value | int) -> ir.Value:
        if isinstance(b, int):
            return a if b == 1 else arith.divui(a, self.index(b))
        return arith.divui(a, b)

    def rem(self, a: ir.Value, b: ir.Value | int) -> ir.Value:
        return arith.remui(a, self.index_of(b))

    def delinearize(self, flat: ir.Value, extents: Sequence[ir.Value | int]) -> list[ir.Value]:
        """The indices, one per extent (row-major), of position `flat` in a
        box of `extents` (numbers, or values known at run time)."""
        rest, indices = flat, []
        for k, extent in reversed(list(enumerate(extents))):
            indices.append(self.rem(rest, extent) if k else rest)
            rest = self.div(rest, extent) if k else rest
        return list(reversed(indices))

    def less(self, a: ir.Value, b: ir.Value | int) -> ir.Value:
        """a < b, unsigned (indices)."""
        return arith.cmpi(arith.CmpIPredicate.ult, a, self.index_of(b))

    def tree(self, values: list[ir.Value], combine: Callable[[ir.Value, ir.Value], ir.Value]) -> ir.Value:
        """`combine` over all `values`, pairwise: a dependency chain log2(n)
        ops deep instead of n, which is what a warp waits on."""
        while len(values) > 1:
            pairs = [combine(a, b) for a, b in zip(values[::2], values[1::2])]
            values = pairs + values[len(pairs) * 2:]
        return values[0]

    # ------------------------------------------------------------ vectors
    def lane(self, value: ir.Value, position: int) -> ir.Value:
        """Element `position` of a 1-D vector."""
        return vector.extract(value, [], [position])

    def load(self, width: int, element: str | ir.Type, buffer: ir.Value, indices: Sequence[ir.Value],
             alignment: int | None = None) -> ir.Value:
        """A `width`-wide vector.load at `indices` of `buffer`, aligned to `alignment` bytes."""
        op = vector.LoadOp(vector_of(width, element), buffer, list(indices),
                           alignment=alignment)
        return op.result

    def store(self, value: ir.Value, buffer: ir.Value, indices: Sequence[ir.Value],
              alignment: int | None = None) -> None:
        vector.StoreOp(value, buffer, list(indices), alignment=alignment)

    def xor_reduce(self, value: ir.Value, combine: Callable[[ir.Value, ir.Value], ir.Value], lanes: int,
                   width: int = 32) -> ir.Value:
        """`combine` over `lanes` neighbouring lanes (a power of two), by xor
        shuffles among groups of `width` lanes: every lane gets the result."""
        offset = 1
        while offset < lanes:
            shuffled = gpu.ShuffleOp(value, self.constant(offset, "i32"), self.constant(width, "i32"),
                                     gpu.ShuffleMode.XOR).results[0]
            value = combine(value, shuffled)
            offset *= 2
        return value

    # ------------------------------------------------------------ control flow
    @contextlib.contextmanager
    def only_if(self, condition: ir.Value | None) -> Iterator[None]:
        """What the block builds, under `scf.if condition` (unguarded for None)."""
        if condition is None:
            yield
            return
        guarded = scf.IfOp(condition)
        with ir.InsertionPoint(guarded.then_block):
            yield
            scf.YieldOp([])

    def choose(self, condition: ir.Value, types: Sequence[ir.Type], then_values: Callable[[], list[ir.Value]],
               else_values: Callable[[], list[ir.Value]], then_share: float | None = None) -> list[ir.Value]:
        """The values (of `types`) `then_values()` or `else_values()` builds,
        by `condition`: an scf.if with results. `then_share` as for `either`."""
        branch = scf.IfOp(condition, list(types), has_else=True)
        _record_then_share(branch, then_share)
        for block, make in ((branch.then_block, then_values), (branch.else_block, else_values)):
            with ir.InsertionPoint(block):
                scf.YieldOp(make())
        return list(branch.results)

    @contextlib.contextmanager
    def either(self, condition: ir.Value, then_share: float | None = None) -> Iterator[tuple[Callable, Callable]]:
        """An scf.if with an else block and no results: yields (then, else_),
        context managers building each side. `then_share`: the share of the
        threads that take the then side, where it is known (for the kernel
        report's counts)."""
        branch = scf.IfOp(condition, has_else=True)
        _record_then_share(branch, then_share)

        @contextlib.contextmanager
        def side(block):
            with ir.InsertionPoint(block):
                yield
                scf.YieldOp([])
        yield (lambda: side(branch.then_block)), (lambda: side(branch.else_block))

    @contextlib.contextmanager
    def loop(self, start: ir.Value | int, stop: ir.Value | int, step: ir.Value | int,
             carried: Sequence[ir.Value] = (), tagged: bool = True) -> Iterator[Loop]:
        """An scf.for; the body is built inside the block and ends with the
        values given to `Loop.yield_` (carried as `carried`). `tagged`
        records the kernel's path on the loop for the kernel report."""
        bounds = [self.index_of(v) for v in (start, stop, step)]
        op = scf.ForOp(*bounds, list(carried))
        if tagged and self.path:
            self.tag(op)
        frame = Loop(op)
        with ir.InsertionPoint(op.body):
            yield frame
            scf.YieldOp(frame.yielded)

    @contextlib.contextmanager
    def parallel(self, start: int, stop: int, step: int) -> Iterator[tuple[ir.Operation, ir.Value]]:
        """An scf.parallel over one index (on the CPU, async-parallel-for makes
        each iteration a task for the runtime's threads); yields it and its index."""
        bounds = [[self.index(v)] for v in (start, stop, step)]
        loop = scf.ParallelOp([], *bounds, [])
        body = loop.regions[0].blocks.append(ir.IndexType.get())
        self.tag(loop)
        with ir.InsertionPoint(body):
            yield loop.operation, body.arguments[0]
            scf.ReduceOp([], 0)

    def barrier(self) -> None:
        """gpu.barrier, naming the kernel's path: when K is one step, the K
        loop (which names it as well) folds away, and the barriers stay."""
        self.tag(gpu.BarrierOp())

    def place_constants_before(self, op: ir.Operation) -> None:
        """Constants built from now on go right before `op` (the launch)."""
        self._constants_at = ir.InsertionPoint(op)

    def discard(self, launch) -> None:
        """Erase a launch that failed to build, and the constants built for it."""
        if launch is not None:
            launch.operation.erase()
        for value in reversed(list(self._constants.values())):
            if not list(value.uses):
                value.owner.erase()
        self._constants.clear()

    def tag(self, op) -> None:
        operation = op.operation if hasattr(op, "operation") else op
        operation.attributes[KERNEL_PATH_ATTR] = ir.StringAttr.get(self.path)

    @staticmethod
    def mean_trips(loop, trips: float) -> None:
        """Record how many trips a loop with run-time bounds makes on average
        over the blocks (the kernel report's flops and bytes count them)."""
        operation = loop.operation if hasattr(loop, "operation") else loop
        operation.attributes[MEAN_TRIPS_ATTR] = ir.FloatAttr.get(ir.F64Type.get(), float(trips))

    @staticmethod
    def useful_fraction(loop, fraction: float) -> None:
        """Record the share of a loop's work that is not padding (the kernel report counts only it)."""
        operation = loop.operation if hasattr(loop, "operation") else loop
        operation.attributes[USEFUL_ATTR] = ir.FloatAttr.get(ir.F64Type.get(), float(fraction))


def build_cpu_kernel(anchor: ir.Operation, kernel: str, path: str, schedule: str,
                     body: Callable[[KernelBuilder], None]) -> None:
    """A CPU kernel, in one scf.execute_region right before `anchor`, its
    body built by `body`. Any failure, in building or in verifying it,
    erases it and is a KernelBuildError naming `kernel`, the schedule and
    the op."""
    with ir.InsertionPoint(anchor), anchor.location:
        region = scf.ExecuteRegionOp([])
        block = region.regions[0].blocks.append()
        w = KernelBuilder(ir.InsertionPoint(region.operation), path=path)
        try:
            with ir.InsertionPoint(block):
                body(w)
                scf.YieldOp([])
            region.operation.verify()
        except Exception as error:  # noqa: BLE001 - every failure here is the generator's
            w.discard(region)
            raise KernelBuildError(kernel, schedule, _short(anchor.location), error) from error


# gpu.all_reduce's kinds by name (gpu_distribute.COMBINERS and its integer ones)
ALL_REDUCE_OPS = {
    "add": gpu.AllReduceOperation.ADD, "mul": gpu.AllReduceOperation.MUL,
    "maximumf": gpu.AllReduceOperation.MAXIMUMF, "minimumf": gpu.AllReduceOperation.MINIMUMF,
    "maxnumf": gpu.AllReduceOperation.MAXNUMF, "minnumf": gpu.AllReduceOperation.MINNUMF,
    "or": gpu.AllReduceOperation.OR, "and": gpu.AllReduceOperation.AND,
    "maxsi": gpu.AllReduceOperation.MAXSI, "minsi": gpu.AllReduceOperation.MINSI,
}


def block_all_reduce(kind: str, partial: ir.Value) -> tuple[ir.Value, ir.Operation]:
    """(the block's combination of every thread's `partial`, the all_reduce
    op). The shuffles it lowers to move 32-bit words (nvvm.shfl.sync takes
    nothing else): booleans travel as i32, f16 and bf16 as f32 (exact for
    max and min; a sum or product rounds once, at the end)."""
    wide = _as_word(partial)
    reduced = gpu.AllReduceOp(wide, op=ALL_REDUCE_OPS[kind], uniform=True)
    return _from_word(reduced.result, partial.type), reduced.operation


def _as_word(value: ir.Value) -> ir.Value:
    """A value as the 32-bit word a shuffle moves: a boolean as i32, f16 and bf16 as f32."""
    t = value.type
    if isinstance(t, ir.IntegerType) and t.width == 1:
        return arith.extui(ir.IntegerType.get_signless(32), value)
    if isinstance(t, ir.FloatType) and t.width < 32:
        return arith.extf(ir.F32Type.get(), value)
    return value


def _from_word(word: ir.Value, t: ir.Type) -> ir.Value:
    if word.type == t:
        return word
    return arith.trunci(t, word) if isinstance(t, ir.IntegerType) else arith.truncf(t, word)


_COMBINE = {"add": (arith.addf, arith.addi), "mul": (arith.mulf, arith.muli),
            "maximumf": (arith.maximumf, None), "minimumf": (arith.minimumf, None),
            "maxnumf": (arith.maxnumf, None), "minnumf": (arith.minnumf, None),
            "or": (None, arith.ori), "and": (None, arith.andi), "maxsi": (None, arith.maxsi),
            "minsi": (None, arith.minsi)}


def group_all_reduce(w: "KernelBuilder", kind: str, partial: ir.Value, lanes: int) -> ir.Value:
    """The combination of `partial` over each aligned group of `lanes`
    neighbouring threads (a power of two up to a warp), every thread of the
    group getting it: xor shuffles of 32-bit words (`_as_word`)."""
    wide = _as_word(partial)
    float_combine, int_combine = _COMBINE[kind]
    combine = float_combine if isinstance(wide.type, ir.FloatType) else int_combine
    return _from_word(w.xor_reduce(wide, combine, lanes), partial.type)


def _attribute(value: int | float, t: ir.Type) -> ir.Attribute:
    if isinstance(t, ir.VectorType):
        return ir.DenseElementsAttr.get_splat(t, _attribute(value, t.element_type))
    if is_float(t):
        return ir.FloatAttr.get(t, float(value))
    return ir.IntegerAttr.get(t, int(value))


@dataclass(frozen=True)
class LaunchIds:
    """The block's place in the grid and the thread's in the block (x only:
    the launches here are 1-D blocks)."""
    block_x: ir.Value
    block_y: ir.Value
    block_z: ir.Value
    thread: ir.Value
    workgroup: tuple[ir.Value, ...]   # the launch's workgroup buffers, in the order asked for


def build_launch(before: ir.Operation, kernel: str, schedule: str, grid: tuple[int | ir.Value, ...], threads: int,
                 body: Callable[[KernelBuilder, LaunchIds], None], path: str = "",
                 workgroup: Sequence[ir.MemRefType] = (), dynamic_shared_bytes: int = 0) -> ir.Operation:
    """A gpu.launch of `kernel` on `grid` blocks of `threads` threads, built
    right before `before` and located at it (so kernel ops name the torch
    op); a grid size may be a value the host computes (dynamic shapes).
    `body(builder, ids)` builds the kernel's body; `workgroup` buffers
    are the launch's workgroup attributions, `dynamic_shared_bytes` its
    dynamic shared memory. Any failure, in building or in verifying the
    launch, is a KernelBuildError naming the kernel, `schedule` and the op."""
    location = before.location
    with location, ir.InsertionPoint(before):
        builder = KernelBuilder(ir.InsertionPoint.current, path)
        launch = None
        try:
            sizes = [builder.index(v) if isinstance(v, int) else v for v in (*grid, threads, 1, 1)]
            shared = builder.constant(dynamic_shared_bytes, "i32") if dynamic_shared_bytes else None
            launch = gpu.LaunchOp(sizes[:3], sizes[3:], dynamic_shared_memory_size=shared)
            builder.place_constants_before(launch.operation)
            launch.attributes["module"] = ir.FlatSymbolRefAttr.get(kernel)
            launch.attributes["function"] = ir.FlatSymbolRefAttr.get(kernel)
            block = launch.regions[0].blocks[0]
            buffers = tuple(block.add_argument(t, location) for t in workgroup)
            if workgroup:
                launch.attributes["workgroup_attributions"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), len(workgroup))
            arguments = list(block.arguments)
            ids = LaunchIds(*arguments[0:3], arguments[3], buffers)
            builder.thread = ids.thread
            with ir.InsertionPoint(block):
                body(builder, ids)
                gpu.TerminatorOp()
            launch.operation.verify()
        except Exception as error:  # noqa: BLE001 - every failure here is the generator's
            builder.discard(launch)
            raise KernelBuildError(kernel, schedule, _short(location), error) from error
    return launch.operation


def _short(location: ir.Location) -> str:
    text = str(location)
    return text[4:-1] if text.startswith("loc(") else text
