"""shape-buffers: a reshape whose shape the host computed becomes a view;
open-expands: an expand_shape splitting a dim into several of run-time
size becomes one too.

With dynamic shapes, torch-mlir lowers a view that splits an open dim
(`[b * s, 32] -> [b, s, 4, 8]`) as a reshape taking its shape from a small
buffer: the sizes are stored into it one by one and memref.reshape reads
it. On the GPU those stores and the reads of the buffer would be device
work (one-thread kernels) between the host's size arithmetic and the
allocations that need the sizes. Where every write of the buffer stores a
size at a constant position, in the function body before its readers, each
reshape becomes a memref.reinterpret_cast of the sizes themselves (row-major
strides computed from them), each read of the buffer the size stored there,
and the buffer goes.

memref.expand_shape may split a dim into sizes known only at run time
(B·S as B, S: grouped-reshapes makes them, so that fusion sees through
them), but upstream expand-strided-metadata takes one such size per group
at most (it aborts on more). After the kernel passes have read them, those
of a row-major source become the reinterpret_cast they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref

from .gpu_distribute import as_operation, constant_int, index_constant
from .ir_helpers import PythonPass, as_index, nested_ops, reassociation, row_major


@dataclass
class _ShapeBuffer:
    alloc: ir.Operation
    sizes: dict[int, ir.Value]   # position -> the value stored there
    readers: list[ir.Operation]  # memref.reshape and memref.load ops
    others: list[ir.Operation]   # the stores and the dealloc, to erase


def _shape_buffer(alloc: ir.Operation, block: ir.Block) -> _ShapeBuffer | None:
    """The buffer `alloc` makes, if it holds sizes only (module docstring)."""
    memref_type = ir.MemRefType(alloc.results[0].type)
    if memref_type.rank != 1 or not memref_type.has_static_shape or len(alloc.operands):
        return None
    buffer = _ShapeBuffer(alloc, {}, [], [])
    uses = [as_operation(use.owner) for use in alloc.results[0].uses]
    if any(as_operation(user.parent) != as_operation(block.owner) for user in uses):
        return None
    order = {op: position for position, op in enumerate(as_operation(o) for o in block.operations)}
    for user in sorted(uses, key=order.__getitem__):
        if user.name == "memref.store" and user.operands[1] == alloc.results[0]:
            position = constant_int(user.operands[2])
            if position is None or buffer.readers:
                return None
            buffer.sizes[position] = user.operands[0]
            buffer.others.append(user)
        elif user.name == "memref.load" and constant_int(user.operands[1]) in buffer.sizes:
            buffer.readers.append(user)
        elif user.name == "memref.reshape" and user.operands[1] == alloc.results[0]:
            buffer.readers.append(user)
        elif user.name == "memref.dealloc":
            buffer.others.append(user)
        else:
            return None
    if len(buffer.sizes) != memref_type.shape[0] or not any(r.name == "memref.reshape" for r in buffer.readers):
        return None
    return buffer


def _reinterpret(reshape: ir.Operation, sizes: list[ir.Value]) -> None:
    """`reshape` as a reinterpret_cast of its source to `sizes` (index values), row-major."""
    result_type = ir.MemRefType(reshape.results[0].type)
    static_strides, _ = result_type.get_strides_and_offset()
    with ir.InsertionPoint(reshape), reshape.location:
        indices = [as_index(size) for size in sizes]
        strides, running = [None] * len(indices), index_constant(1)
        for k in reversed(range(len(indices))):
            strides[k] = running
            running = arith.muli(running, indices[k]) if k else running
        dynamic = ir.ShapedType.get_dynamic_size()
        open_sizes = [size for size, static in zip(indices, result_type.shape) if static == dynamic]
        open_strides = [stride for stride, static in zip(strides, static_strides) if static == dynamic]
        view = memref.ReinterpretCastOp(result_type, reshape.operands[0], [], open_sizes, open_strides,
                                        [0], list(result_type.shape), list(static_strides))
    reshape.results[0].replace_all_uses_with(view.result)
    reshape.erase()


@dataclass(frozen=True)
class ShapeBuffers(PythonPass):
    name = "shape-buffers"

    def _run(self, module: ir.Operation, pass_) -> None:
        with module.context:
            for func in module.regions[0].blocks[0].operations:
                if func.operation.name == "func.func" and func.operation.regions[0].blocks:
                    self._function(func.operation.regions[0].blocks[0])

    @staticmethod
    def _function(block: ir.Block) -> None:
        allocs = [op.operation for op in block.operations if op.operation.name == "memref.alloc"]
        for alloc in allocs:
            buffer = _shape_buffer(alloc, block)
            if buffer is None:
                continue
            sizes = [buffer.sizes[k] for k in range(len(buffer.sizes))]
            for reader in buffer.readers:
                if reader.name == "memref.load":
                    reader.results[0].replace_all_uses_with(buffer.sizes[constant_int(reader.operands[1])])
                    reader.erase()
                else:
                    _reinterpret(reader, sizes)
            for op in buffer.others:
                op.erase()
            alloc.erase()


def _open_groups(expand: ir.Operation) -> bool:
    """Does a group of `expand` split a dim into two or more sizes known only at run time?"""
    shape = ir.MemRefType(expand.results[0].type).shape
    return any(sum(ir.ShapedType.is_dynamic_size(shape[d]) for d in group) > 1 for group in reassociation(expand))


@dataclass(frozen=True)
class OpenExpands(PythonPass):
    name = "open-expands"

    def _run(self, module: ir.Operation, pass_) -> None:
        expands = nested_ops(module, lambda op: op.name == "memref.expand_shape")
        for expand in expands:
            if not _open_groups(expand):
                continue
            open_sizes = iter(list(expand.operands)[1:])  # the output shape's run-time sizes, in order
            with ir.InsertionPoint(expand), expand.location:
                sizes = [next(open_sizes) if ir.ShapedType.is_dynamic_size(size) else index_constant(size)
                         for size in ir.MemRefType(expand.results[0].type).shape]
            if row_major(ir.MemRefType(expand.operands[0].type)):
                _reinterpret(expand, sizes)
            else:
                _strided_reinterpret(expand, sizes)


def _strided_reinterpret(expand: ir.Operation, sizes: list[ir.Value]) -> None:
    """`expand` of a source of any layout (a slice) as a reinterpret_cast of
    its base buffer: the source's offset, and each group's strides from the
    stride of the dim it splits times the sizes inside it."""
    source, result_type = expand.operands[0], ir.MemRefType(expand.results[0].type)
    rank = ir.MemRefType(source.type).rank
    static_strides, static_offset = result_type.get_strides_and_offset()
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    with ir.InsertionPoint(expand), expand.location:
        metadata = memref.ExtractStridedMetadataOp(source)
        base, offset = metadata.results[0], metadata.results[1]
        source_strides = list(metadata.results)[2 + rank:2 + 2 * rank]
        strides = []
        for d, group in enumerate(reassociation(expand)):
            running, group_strides = source_strides[d], []
            for r in reversed(group):
                group_strides.insert(0, running)
                running = arith.muli(running, sizes[r])
            strides += group_strides
        view = memref.ReinterpretCastOp(
            result_type, base, [offset] if static_offset == dynamic else [],
            [size for size, static in zip(sizes, result_type.shape) if ir.ShapedType.is_dynamic_size(static)],
            [stride for stride, static in zip(strides, static_strides) if static == dynamic],
            [static_offset], list(result_type.shape), list(static_strides))
    expand.results[0].replace_all_uses_with(view.result)
    expand.erase()
