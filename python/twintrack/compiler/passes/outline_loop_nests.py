"""outline-loop-nests: each loop nest at the top of a CPU function moved into
a function of its own, which LLVM may not inline.

A model's CPU code is one function holding every kernel (ResNet-50: some
150 loop nests, 3 MB of LLVM dialect), and LLVM's optimization and code
generation grow faster than linearly with a function's size: the JIT took
22 s of ResNet-50's 30 s compile (batch 1, 64²). Function by function, the
same code compiles in a fraction of that. The nest reads what it captured
(buffers, views, run-time sizes) as arguments; the constants it reads are
cloned in, so that LLVM still sees constant trip counts and strides. A
nest equal to an earlier one but for the buffers it is given (a repeated
layer's) calls the earlier one's function: ResNet-50's 322 nests are 115
functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func

from ...dialect import operation_text
from .ir_helpers import PythonPass, defined_functions, nested_ops

NESTS = ("scf.for", "scf.parallel", "scf.while", "affine.for", "affine.parallel")
CONSTANTS = ("arith.constant", "memref.get_global")


def _passthrough(attribute: str) -> ir.Attribute:
    """An LLVM function attribute (noinline, alwaysinline), as func.func's `passthrough` carries it to llvm.func."""
    return ir.ArrayAttr.get([ir.StringAttr.get(attribute)])


def _defined_inside(nest: ir.Operation) -> set:
    """The values `nest` defines: its ops' results and its blocks' arguments."""
    defined = set()
    for op in nested_ops(nest):
        defined.update(op.results)
        for region in op.regions:
            for block in region.blocks:
                defined.update(block.arguments)
    return defined


def _captured(nest: ir.Operation) -> list[ir.Value]:
    """The values defined outside `nest` that it reads, in first-read order."""
    defined, captured = _defined_inside(nest), {}
    for op in nested_ops(nest):
        captured.update((v, None) for v in op.operands if v not in defined)
    return list(captured)


def _is_constant(value: ir.Value) -> bool:
    owner = value.owner
    return isinstance(owner, (ir.Operation, ir.OpView)) and owner.operation.name in CONSTANTS


def _outline(nest: ir.Operation, name: str, before: ir.Operation) -> tuple[ir.Operation, ir.Operation]:
    """`nest` as a call of a new private, not-inlined function `name`, built
    before `before`: the function and the call."""
    captured = _captured(nest)
    arguments = [v for v in captured if not _is_constant(v)]
    with ir.InsertionPoint(before), nest.location:
        outlined = func.FuncOp(name, ir.FunctionType.get([v.type for v in arguments], [r.type for r in nest.results]),
                               visibility="private")
    outlined.attributes["passthrough"] = _passthrough("noinline")
    entry = outlined.add_entry_block(arg_locs=[nest.location] * len(arguments))
    mapping = dict(zip(arguments, entry.arguments))
    with ir.InsertionPoint(entry), nest.location:
        for value in captured:
            if _is_constant(value):
                mapping[value] = value.owner.operation.clone().results[0]
        placeholder = func.ReturnOp([])
    with ir.InsertionPoint(nest), nest.location:
        call = func.CallOp(outlined, arguments)
    for result, replacement in zip(nest.results, call.results):
        result.replace_all_uses_with(replacement)
    nest.move_before(placeholder.operation)
    placeholder.operation.erase()
    with ir.InsertionPoint(entry), nest.location:
        func.ReturnOp(list(nest.results))
    for op in nested_ops(nest):
        for position, operand in enumerate(op.operands):
            if operand in mapping:
                op.operands[position] = mapping[operand]
    return outlined.operation, call.operation


def _body_key(function: ir.Operation, name: str) -> str:
    """The function's text but for its name: equal for the nests of a repeated
    layer. (Printed unverified: verifying first took 60% of the time.)"""
    return operation_text(function, assume_verified=True).replace(f"@{name}(", "@_(", 1)


@dataclass(frozen=True)
class OutlineLoopNests(PythonPass):
    name = "outline-loop-nests"

    def _run(self, module: ir.Operation, pass_) -> None:
        shared: dict[str, str] = {}  # a nest's body -> the function holding it
        for function in defined_functions(module):
            name = ir.StringAttr(function.attributes["sym_name"]).value
            nests = [op.operation for op in function.regions[0].blocks[0].operations if op.operation.name in NESTS]
            if nests:  # inlined into its C-interface wrapper, which would otherwise call it with every field
                function.attributes["passthrough"] = _passthrough("alwaysinline")  # of every descriptor
            for number, nest in enumerate(nests):
                outlined, call = _outline(nest, f"{name}_nest_{number}", function)
                key = _body_key(outlined, f"{name}_nest_{number}")
                if key in shared:  # a repeated layer's nest: its first copy serves it, compiled once
                    call.attributes["callee"] = ir.FlatSymbolRefAttr.get(shared[key])
                    outlined.erase()
                else:
                    shared[key] = f"{name}_nest_{number}"
