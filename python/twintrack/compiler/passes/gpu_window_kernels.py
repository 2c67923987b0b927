"""gpu-window-kernels: a reduction over a small window at each output
element whose loads run along the output's last dim (a depthwise
convolution or a pooling window computing channels-last) becomes one window kernel
(twintrack.compiler.kernels.window_kernel), with the elementwise op that
alone reads its result (batch norm, an activation, the narrowing to half
precision) as its epilogue: vector loads along the channels, the
accumulator in registers, one store.

On the generic path the same site is two kernels, a thread an element: the
reduction writing its f32 result, then the epilogue reading it back.
A site this pass cannot take (windows over MAX_TAPS positions, sizes known
only at run time, no load the lanes share) stays for the generic path, as
does one whose kernel fails to build (recorded by kernel_fallback; with
`strict`, an error). Runs before the row kernels, which would otherwise
take the epilogue alone.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from mlir import ir

from ..dispatch_kinds import DispatchKind, dispatch_kind
from ..target import gpu_target
from ..kernels.matmul_common import element_bytes
from ..kernels.window_kernel import (WindowEpilogue, WindowInput, WindowProgram, build_window_kernel, lane_dim_used,
                                     reads_lane_last)
from .generic_body import describe_body, indexing_maps, map_dims
from .gpu_matmul_kernels import epilogue_after
from .ir_helpers import PythonPass, defined_functions, defining_op
from .kernel_fallback import kernel_site
from .matmul_sites import fill_before
from .row_sites import contiguous_rows, replace_group

MAX_TAPS = 64          # window positions a thread loops over (a 7x7 depthwise window: 49)
MAX_STAGED_BYTES = 32 * 1024  # shared memory a block copies small inputs into (960 channels' 3x3 f16: 17 KB)
LANE_WIDTHS = (8, 4, 2)  # elements of the last output dim a thread computes, widest that divides it


@dataclass(frozen=True)
class WindowSite:
    fill: ir.Operation
    reduction: ir.Operation
    consumer: ir.Operation | None
    program: WindowProgram

    @property
    def group(self) -> list[ir.Operation]:
        return [self.fill, self.reduction] + ([self.consumer] if self.consumer is not None else [])


def _loop_extents(op: ir.Operation, rank: int) -> list[int] | None:
    """Each loop's extent, read off the operands whose maps index by it alone; None if one is not."""
    extents: list[int | None] = [None] * rank
    for value, affine_map in zip(op.operands, indexing_maps(op)):
        shape = ir.MemRefType(value.type).shape
        for position, expr in enumerate(affine_map.results):
            expr = expr.maybe_downcast()
            if isinstance(expr, ir.AffineDimExpr):
                extents[expr.position] = shape[position]
    return None if None in extents else extents


def _shape(op: ir.Operation) -> tuple[list[int], list[int]] | None:
    """(parallel extents, window extents) of a generic whose parallel loops
    come first and index its one output as they are, its window after them."""
    iterators = [str(it) for it in op.attributes["iterator_types"]]
    parallel = next((i for i, it in enumerate(iterators) if "reduction" in it), len(iterators))
    if parallel == 0 or parallel == len(iterators) or any("parallel" in it for it in iterators[parallel:]):
        return None
    if len(op.opview.outputs) != 1 or map_dims(indexing_maps(op)[-1]) != tuple(range(parallel)):
        return None
    if not all(isinstance(v.type, ir.MemRefType) and ir.MemRefType(v.type).has_static_shape for v in op.operands):
        return None
    extents = _loop_extents(op, len(iterators))
    if extents is None or math.prod(extents[parallel:]) > MAX_TAPS:
        return None
    return extents[:parallel], extents[parallel:]


def takes_dense_window(filters: int, weight_bytes: int) -> bool:
    """Would a window kernel take a convolution computed directly (each
    output summing over channels and window) with this many filters and a
    weight this large? Its lanes split the filters and its weight is staged."""
    return _lanes(filters) is not None and weight_bytes <= MAX_STAGED_BYTES


def _lanes(last: int) -> int | None:
    return next((width for width in LANE_WIDTHS if last % width == 0), None)


def _body_loads(body, lane_dim: int, lane_inputs: set, vector_captured: frozenset[int]) -> tuple[bool, bool]:
    """(does every load the lanes differ in take them as one vector, at the
    lane's own column of a vector-ready buffer; is there such a load)?
    `lane_inputs`: the refs of the inputs whose elements differ by lane."""
    columns, varying, vectors = {("index", lane_dim)}, {("index", lane_dim), *lane_inputs}, False
    for i, op in enumerate(body):
        if not any(ref in varying for ref in op.operands):
            continue
        varying.add(("op", i))
        if op.name == "linalg.index" and op.operands[0] in columns:
            columns.add(("op", i))
        elif op.name == "memref.load":
            *shared, last = op.operands[1:]
            if op.operands[0][1] not in vector_captured or last not in columns \
                    or any(ref in varying for ref in shared):
                return False, vectors
            vectors = True
    return True, vectors


def _epilogue(found, lanes: int, lane_dim: int) -> tuple[WindowEpilogue, bool] | None:
    """The found epilogue as the kernel applies it, and whether its output takes the lanes' vectors."""
    if found is None or found.view is not None:
        return None  # read through a view: the kernel stores the reduction's result as it is
    epilogue, read_dims = found.epilogue, found.output_view.loop_dims
    lane_loop = read_dims[lane_dim]
    tensors = {k: found.consumer.operands[k] for k, _ in epilogue.tensor_inputs()}
    vector_inputs = frozenset(k for k, inp in epilogue.tensor_inputs()
                              if inp.dims[-1] == lane_loop and contiguous_rows(ir.MemRefType(tensors[k].type), lanes))
    store_dims = found.output_view.store_dims
    vector_output = store_dims[-1] == lane_loop and contiguous_rows(ir.MemRefType(found.output.type), lanes)
    return WindowEpilogue(epilogue, tensors, tuple(found.captured), tuple(read_dims), tuple(store_dims),
                          vector_inputs), vector_output


def _staged(value: ir.Value, affine_map: ir.AffineMap, lane_dim: int) -> bool:
    """Is the input read at the lanes' loop in another dim than its last, and
    at window loops only (the same for every block: a depthwise weight)?"""
    dims = map_dims(affine_map)
    return dims is not None and lane_dim in dims[:-1] and all(d >= lane_dim for d in dims)


def _inputs(op: ir.Operation, lanes: int, parallel: int) -> tuple[WindowInput, ...]:
    """The reduction's inputs as the kernel reads them; those staged in
    shared memory while their copies fit in MAX_STAGED_BYTES."""
    inputs, staged_bytes = [], 0
    for value, affine_map in zip(op.opview.inputs, indexing_maps(op)):
        memref_type = ir.MemRefType(value.type)
        size = math.prod(memref_type.shape) * element_bytes(str(memref_type.element_type))
        staged = _staged(value, affine_map, parallel - 1) and staged_bytes + size <= MAX_STAGED_BYTES
        staged_bytes += size if staged else 0
        inputs.append(WindowInput(value, affine_map, contiguous_rows(memref_type, lanes), staged))
    return tuple(inputs)


def window_site(op: ir.Operation, neighbours: int = 2, staging_blocks: int = 2) -> WindowSite | None:
    """The window kernel `op` and the ops around it become, or None."""
    # A window read through its map (no padding folded in) looks like a convolution to the fusion pass.
    if op.name != "linalg.generic" or dispatch_kind(op) not in (DispatchKind.REDUCTION, DispatchKind.MATMUL):
        return None
    shape = _shape(op)
    if shape is None:
        return None
    parallel, window = shape
    lanes, lane_dim = _lanes(parallel[-1]), len(parallel) - 1
    output = op.opview.outputs[0]
    fill = fill_before(op, output)
    captured: list[ir.Value] = []
    described = describe_body(op, captured=captured)
    if lanes is None or fill is None or described is None:
        return None
    inputs = _inputs(op, lanes, len(parallel))
    vector_captured = frozenset(i for i, buffer in enumerate(captured)
                                if contiguous_rows(ir.MemRefType(buffer.type), lanes))
    body, result = described
    vector_inputs = [inp.staged or (inp.vectors and reads_lane_last(inp.map, lane_dim)) for inp in inputs]
    lane_inputs = {("arg", k) for k, inp in enumerate(inputs) if lane_dim_used(inp.map, lane_dim)}
    accumulator = ("arg", len(inputs))  # each lane's own sum
    body_vectors_only, body_vectors = _body_loads(body, lane_dim, lane_inputs | {accumulator}, vector_captured)
    if any(("arg", k) in lane_inputs and not vector for k, vector in enumerate(vector_inputs)) \
            or not body_vectors_only:
        return None  # a load each lane makes on its own (rows as lanes): the generic path reads those better
    if not any(vector_inputs) and not body_vectors:
        return None  # nothing the lanes load together: the generic path's thread an element is as good
    found = epilogue_after(op, output, list(op.opview.inputs) + captured)
    taken = _epilogue(found, lanes, lane_dim)
    epilogue, vector_output = taken if taken else (None, contiguous_rows(ir.MemRefType(output.type), lanes))
    # A block that copies inputs into shared memory first strides over enough outputs to pay for it.
    staging = any(inp.staged for inp in inputs)
    max_blocks = gpu_target().sm_count * staging_blocks if staging else None
    # Neighbours along a spatial dim ((n, h, w, c) outputs) share loads; along a batch ((n, c): a global pool) none.
    neighbours = neighbours if len(parallel) > 2 and parallel[-2] % neighbours == 0 else 1
    program = WindowProgram(tuple(parallel), tuple(window), lanes, inputs, body, result, tuple(captured),
                            vector_captured, defining_op(fill.operands[0]), found.output if taken else output,
                            vector_output, epilogue, max_blocks, staging_blocks if staging else 1, neighbours)
    return WindowSite(fill, op, found.consumer if taken else None, program)


@dataclass(frozen=True)
class GpuWindowKernels(PythonPass):
    name = "gpu-window-kernels"
    strict: bool = False      # a kernel that fails to build is an error, not a fallback (--strict-kernels)
    neighbours: int = 2       # outputs a thread computes along the next-to-last dim (where it divides)
    staging_blocks: int = 2   # resident blocks an SM of a kernel that stages inputs: its grid (256 threads
                              # each; 2 hold a thread to 128 registers, 4 to 64)

    def _run(self, module: ir.Operation, pass_) -> None:
        count = 0
        for func in defined_functions(module):
            ops = [o.operation for o in func.regions[0].blocks[0].operations]
            # All found first: a replacement erases ops a later look would visit.
            sites = [window_site(op, self.neighbours, self.staging_blocks) for op in ops]
            for site in [s for s in sites if s is not None]:
                with kernel_site(module, self.strict):
                    replace_group(site.group, functools.partial(
                        build_window_kernel, kernel=f"forward_window_kernel_{count}", program=site.program))
                count += 1

