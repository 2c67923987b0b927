"""A diagnostic at an unknown location, placed anyway.

Some passes fail on ops that carry no location of their own (torch-mlir's
constants: `torch.constant.int` at loc(unknown)), so MLIR's message names
neither the torch op nor the model line. The stage's input IR says more:
the ops of the name the message gives, the one whose text the message
quotes first, and, for one without a location, the ops that use its
results (the torch op it was made for) or, failing those, the nearest op
before it in its block that has a location."""

from __future__ import annotations

import re

from ..locations import short_location

_OP_NAME = re.compile(r"""(?:operation|op) '([\w$.]+)'|^'([\w$.]+)' op\b|"([\w$]+\.[\w$.]+)"\(""")
_RESULT_NAME = re.compile(r"^\s*(%[\w#:, %]+=\s*)")


def is_unknown(location) -> bool:
    return short_location(location) in ("unknown", "")


def failing_op_name(message: str) -> str | None:
    """The op a diagnostic's message names: 'failed to legalize operation
    'torch.constant.int'', ''linalg.generic' op ...', or the op text it quotes."""
    found = _OP_NAME.search(message)
    return next((g for g in found.groups() if g), None) if found else None


def locate(message: str, input_ir: str, binding: str) -> str | None:
    """'aten.roll at model.py:5:0' for a diagnostic at an unknown location,
    from the stage's input IR; None if nothing in it says where."""
    name = failing_op_name(message)
    if name is None:
        return None
    try:
        candidates = _candidates(input_ir, binding, name)
    except Exception:  # the stage's input should parse; if it does not, there is nothing more to say
        return None
    quoted = _quoted_text(message)
    candidates.sort(key=lambda candidate: candidate[0] != quoted)  # the op the message quotes first
    return next((where for _, where in candidates if where), None)


def _candidates(input_ir: str, binding: str, name: str) -> list[tuple[str, str | None]]:
    """(generic text without result names, known location) of each op named `name`."""
    from ..bindings import bindings, new_context
    ir = bindings(binding).ir
    found = []
    with new_context(binding):
        module = ir.Module.parse(input_ir)

        def visit(op):
            if op.name == name:
                found.append((_without_result_names(op.get_asm(print_generic_op_form=True)), _known_location(op)))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _known_location(op) -> str | None:
    """The op's own location, else that of the first op using one of its
    results, else that of the nearest op before it in its block."""
    if not is_unknown(op.location):
        return short_location(op.location)
    for result in op.results:
        for use in result.uses:
            if not is_unknown(use.owner.location):
                return short_location(use.owner.location)
    before = None
    for other in op.block.operations:
        if other == op:
            break
        if not is_unknown(other.location):
            before = other
    return short_location(before.location) if before is not None else None


def _quoted_text(message: str) -> str | None:
    """The op text a 'failed to legalize' message ends with, result names dropped."""
    _, separator, text = message.partition(": ")
    return _without_result_names(text) if separator and '"(' in text else None


def _without_result_names(text: str) -> str:
    return _RESULT_NAME.sub("", text.strip(), count=1)
