"""Causal masks read off an attention's score epilogue, so the flash
attention kernel can skip the key tiles a mask hides entirely.

The mask condition is evaluated symbolically: an integer is an affine form
(row coefficient, key coefficient, constant) of the score's query row and
key, with whether it is known non-negative; a condition is (form,
predicate), meaning "form pred 0".

The epilogue's ops are matched as the ops they are (`BodyOp.source`): a
comparison's predicate is its `arith.CmpIPredicate` attribute, a constant's
value its typed attribute; nothing is read off printed IR."""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith

from .epilogue import BodyOp, Epilogue, uncast
from .matmul_common import OutputView

# An arith.cmpi predicate as an order ("lt": x < y), signed or not alike.
_CMPI = {arith.CmpIPredicate.eq: "eq", arith.CmpIPredicate.ne: "ne",
         arith.CmpIPredicate.slt: "lt", arith.CmpIPredicate.sle: "le",
         arith.CmpIPredicate.sgt: "gt", arith.CmpIPredicate.sge: "ge",
         arith.CmpIPredicate.ult: "lt", arith.CmpIPredicate.ule: "le",
         arith.CmpIPredicate.ugt: "gt", arith.CmpIPredicate.uge: "ge"}
_UNSIGNED = (arith.CmpIPredicate.ult, arith.CmpIPredicate.ule, arith.CmpIPredicate.ugt, arith.CmpIPredicate.uge)
_NEGATED = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}
_MIRRORED = {"eq": "eq", "ne": "ne", "lt": "gt", "gt": "lt", "le": "ge", "ge": "le"}
_INTEGERS = ("index", "i64", "i32")
_BOUND = 1 << 24  # sizes, constants: small enough that no i32 sum of a few overflows


def masked_key_reach(epilogue: Epilogue | None, view: OutputView | None, queries: int, keys: int) -> int | None:
    """`reach` such that the score epilogue turns every score whose key is
    past its query row + reach into -inf, whatever the score: a causal mask
    (reach 0). None where it cannot tell; then no key is skipped. The mask
    must be the epilogue's last op, a select of -inf on a condition of the
    row and key indices alone: one comparison of forms built by casts,
    additions and subtractions (exact: the indices are small); or one that
    a score must meet among others to be kept (an `and` with a padding
    mask's gather, say): the keys past reach are hidden then too, and the
    epilogue applies the rest (`masks_only_past_reach` is False)."""
    found = None if max(queries, keys) >= _BOUND else _visible_condition(epilogue, view)
    return None if found is None else _reach(found[0][0], _NEGATED[found[0][1]])


def masks_only_past_reach(epilogue: Epilogue | None, reach: int | None, view: OutputView | None = None) -> bool:
    """Is the epilogue (whose mask `masked_key_reach` read as `reach`) the
    mask alone: every key within reach keeps its score as computed (maybe
    narrowed)? Then the kernel may leave the mask out where no key of a tile
    is past reach, and apply it itself elsewhere."""
    if epilogue is None or reach is None:
        return False
    found = _visible_condition(epilogue, view)
    _, _, kept = final_select(epilogue)
    kept = uncast(epilogue.ops, kept)
    return found is not None and found[1] and kept[0] == "arg" and epilogue.inputs[kept[1]].memref_type is None


def _visible_condition(epilogue: Epilogue | None, view: OutputView | None):
    """(a condition of the row and key every kept score meets, whether the
    kept scores are exactly those that meet it), read off the epilogue's
    final select of -inf; None where there is none."""
    dims = score_dims(view)
    select = None if epilogue is None or dims is None else final_select(epilogue)
    if select is None:
        return None
    condition, masked_if_true, _ = select
    mask = _symbolic(epilogue.ops, condition, dims)
    if _is_condition(mask):
        return (_negate(mask) if masked_if_true else mask), True
    visible = _negated_ref(epilogue.ops, condition) if masked_if_true else condition
    implied = None if visible is None else _implied(epilogue.ops, visible, dims)
    return None if implied is None else (implied, False)


def _implied(ops, ref, dims):
    """A condition of the row and key that i1 `ref` implies: its own, or
    one of an `and`'s operands'; None where there is none."""
    exact = _symbolic(ops, ref, dims)
    if _is_condition(exact):
        return exact
    if ref[0] != "op" or ops[ref[1]].name != "arith.andi":
        return None
    return next((c for c in (_implied(ops, operand, dims) for operand in ops[ref[1]].operands) if c is not None),
                None)


def _negated_ref(ops, ref):
    """The i1 value `ref` negates (x == false, x != true, x xor true); None for anything else."""
    negation = bool_negation(ops, ref)
    return negation[0] if negation is not None and negation[1] else None


def bool_negation(ops, ref):
    """(x, flips) where i1 `ref` is x compared (==, !=) or xor-ed with a bool
    constant: `ref` is not x where `flips`, else x itself; None for anything else."""
    if ref[0] != "op" or len(ops[ref[1]].operands) != 2:
        return None
    op = ops[ref[1]]
    constants = [bool_constant(operand) for operand in op.operands]
    if constants.count(None) != 1:
        return None
    value = next(c for c in constants if c is not None)
    other = op.operands[constants.index(None)]
    if op.name == "arith.xori":
        return other, value
    if op.name != "arith.cmpi":
        return None
    predicate = arith.CmpIPredicate(ir.IntegerAttr(op.source.attributes["predicate"]).value)
    flips = {arith.CmpIPredicate.eq: not value, arith.CmpIPredicate.ne: value}.get(predicate)
    return None if flips is None else (other, flips)


def bool_constant(ref) -> bool | None:
    """An i1 constant's value; None for anything else."""
    value = _constant(ref) if ref[0] == "const" else None
    return value if isinstance(value, bool) else None


def final_select(epilogue: Epilogue):
    """(condition, whether -inf is its true side, the score kept otherwise)
    of the epilogue's last op (maybe narrowed), a select of -inf; None for
    anything else."""
    ops, result = epilogue.ops, uncast(epilogue.ops, epilogue.result)
    if result[0] != "op" or ops[result[1]].name != "arith.select":
        return None
    condition, when_true, when_false = ops[result[1]].operands
    if negative_infinity(uncast(ops, when_true)):
        return condition, True, when_false
    if negative_infinity(uncast(ops, when_false)):
        return condition, False, when_true
    return None


def score_dims(view) -> tuple[int, int] | None:
    """The epilogue's loop dims of the query row and of the key (each unsplit)."""
    if view is None:
        return 1, 2
    if len(view.splits) != 3 or len(view.splits[1]) != 1 or len(view.splits[2]) != 1:
        return None
    first = len(view.splits[0])
    return view.loop_dims[first], view.loop_dims[first + 1]


def _reach(form: tuple[int, int, int], predicate: str) -> int | None:
    """For a mask "a·row + b·key + c pred 0": the reach if it masks exactly the keys past row + reach."""
    row, key, constant = form
    if (row, key) == (1, -1):
        row, key, constant, predicate = -1, 1, -constant, _MIRRORED[predicate]
    if (row, key) != (-1, 1):
        return None
    if predicate == "gt":  # key > row - c
        return -constant
    return -constant - 1 if predicate == "ge" else None  # key >= row - c


def _symbolic(ops, ref, dims: tuple[int, int]):
    """An epilogue value as a form ((a, b, c), non-negative), a condition
    (form, predicate) or a bool; None if it is anything else."""
    if ref[0] == "const":
        return _constant(ref)
    if ref[0] != "op":
        return None
    op = ops[ref[1]]
    if op.name == "linalg.index":
        dim = op.operands[0][1]
        return ((0, 1, 0) if dim == dims[1] else (1, 0, 0), True) if dim in dims else None
    values = [_symbolic(ops, operand, dims) for operand in op.operands]
    if None in values:
        return None
    if op.name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui"):
        return _cast(op, values[0])
    if op.name in ("arith.addi", "arith.subi") and op.result_type in _INTEGERS and all(_is_form(v) for v in values):
        return _combine(values[0], values[1], 1 if op.name == "arith.addi" else -1)
    if op.name == "arith.cmpi":
        return _compare(op, values)
    if op.name == "arith.xori" and True in values:
        return _negate(values[1 - values.index(True)])
    return None


def _is_form(value) -> bool:
    return isinstance(value, tuple) and isinstance(value[1], bool)


def _is_condition(value) -> bool:
    return isinstance(value, tuple) and isinstance(value[1], str)


def _constant(ref):
    """An integer constant as a form, an i1 one as a bool; None for anything else."""
    op = ref[1]
    attribute, t = op.attributes["value"], op.results[0].type
    if isinstance(attribute, ir.BoolAttr):
        return ir.BoolAttr(attribute).value
    if not isinstance(attribute, ir.IntegerAttr) or str(t) not in _INTEGERS:
        return None
    value = ir.IntegerAttr(attribute).value
    return ((0, 0, value), value >= 0) if abs(value) < _BOUND else None


def _cast(op, value):
    """Casts between the integer types keep a small value; a zero extension
    keeps only a non-negative one."""
    if not _is_form(value) or op.result_type not in _INTEGERS or op.operand_types[0] not in _INTEGERS:
        return None
    return value if value[1] or op.name in ("arith.index_cast", "arith.extsi") else None


def _combine(x, y, sign: int):
    form = tuple(a + sign * b for a, b in zip(x[0], y[0]))
    if max(abs(form[0]), abs(form[1])) > 4 or abs(form[2]) >= _BOUND:
        return None
    return form, x[1] and y[1] and sign > 0


def _compare(op: BodyOp, values):
    """arith.cmpi of two forms (unsigned only on non-negative ones), or of a condition and a bool."""
    predicate = arith.CmpIPredicate(ir.IntegerAttr(op.source.attributes["predicate"]).value)
    x, y = values
    if _is_form(x) and _is_form(y):
        difference = _combine(x, y, -1)
        if difference is None or (predicate in _UNSIGNED and not (x[1] and y[1])):
            return None
        return difference[0], _CMPI[predicate]
    if isinstance(x, bool):
        x, y = y, x
    if isinstance(y, bool) and predicate in (arith.CmpIPredicate.eq, arith.CmpIPredicate.ne):
        return x if y == (predicate == arith.CmpIPredicate.eq) else _negate(x)
    return None


def _negate(condition):
    if isinstance(condition, bool):
        return not condition
    return (condition[0], _NEGATED[condition[1]]) if _is_condition(condition) else None


def negative_infinity(ref) -> bool:
    """Is `ref` a floating-point constant -inf?"""
    if ref[0] != "const":
        return False
    attribute = ref[1].attributes["value"]
    return isinstance(attribute, ir.FloatAttr) and ir.FloatAttr(attribute).value == -math.inf
