"""Checks on a host plan (plan.json) that need no GPU, and a dynamic plan
resolved at a call's sizes.

A version-2 plan may leave sizes open. Its `symbols` name them, each read at
a call from an (argument index, dim) of an input; its `lets` ([name,
expression] pairs, evaluated in order) compute from them; and any integer
of a step (a shape, a view's offset, sizes or strides, a grid, a block, the
dynamic shared bytes, an integer scalar argument, flops and bytes) may be an
expression over those names (twintrack.dynamic_shapes' language), and any
size of an argument's shape one over the symbols. `resolve_plan` turns it,
at one set of sizes, into a static plan (version 1's format), which runs as
any other."""

from __future__ import annotations

import ast
import functools
import math

from ..dynamic_shapes import FUNCTION_NAMES, compile_expression, evaluate_expression
from ..errors import ArtifactError, InputMismatchError
from .cuda_driver import TENSOR_MAP_ELEMENTS, TENSOR_MAP_SWIZZLES

KNOWN_OPS = {"alloc", "constant", "free", "copy", "launch"}
MAX_THREADS_PER_BLOCK = 1024
VERSIONS = (1, 2)
INTEGER_SCALARS = {"index", "i64", "i32", "i16", "i8", "i1"}  # scalar types whose value may be an expression


def is_static(plan: dict) -> bool:
    """Whether every entry of the plan is a number (no symbols, no lets)."""
    return not plan.get("symbols") and not plan.get("lets")


# ---------------------------------------------------------------- where a plan holds integers

def map_integers(step: dict, convert) -> dict:
    """`step` with `convert(entry, field)` applied to each of its integers
    (a number, or an expression in version 2); `field` says where the entry
    is ("grid[0]", "args[2].memref.sizes[1]"). Steps without any are returned as they are."""
    op = step.get("op")
    if op in ("alloc", "constant"):
        return {**step, "shape": _map_list(step["shape"], "shape", convert)}
    if op == "copy":
        return {**step, "src": _map_view(step["src"], "src", convert), "dst": _map_view(step["dst"], "dst", convert)}
    if op != "launch":
        return step
    mapped = {**step, "grid": _map_list(step["grid"], "grid", convert),
              "block": _map_list(step["block"], "block", convert),
              "args": [_map_argument(arg, f"args[{k}]", convert) for k, arg in enumerate(step["args"])]}
    for key in ("dynamic_shared_bytes", "flops", "bytes", "when"):
        if mapped.get(key) is not None:
            mapped[key] = convert(mapped[key], key)
    return mapped


def _map_list(entries: list, field: str, convert) -> list:
    return [convert(entry, f"{field}[{k}]") for k, entry in enumerate(entries)]


def _map_view(view: dict, field: str, convert) -> dict:
    return {**view, "offset": convert(view["offset"], f"{field}.offset"),
            "sizes": _map_list(view["sizes"], f"{field}.sizes", convert),
            "strides": _map_list(view["strides"], f"{field}.strides", convert)}


def _map_argument(arg: dict, field: str, convert) -> dict:
    if "memref" in arg:
        return {**arg, "memref": _map_view(arg["memref"], f"{field}.memref", convert)}
    if arg.get("type") in INTEGER_SCALARS:
        return {**arg, "scalar": convert(arg["scalar"], f"{field}.scalar")}
    return arg


# ---------------------------------------------------------------- expressions

def expression_names(text: str) -> set[str]:
    """The sizes an expression reads (the names it calls left out); a SyntaxError where it is none."""
    return {node.id for node in ast.walk(ast.parse(text, mode="eval")) if isinstance(node, ast.Name)} - FUNCTION_NAMES


def expression_problem(text: str, known, defined_later=()) -> str | None:
    """Why `text` is no expression over the names `known`, or None."""
    try:
        unknown = sorted(expression_names(text) - set(known))
    except SyntaxError:
        return f"{text!r} is not an expression"
    later = [name for name in unknown if name in defined_later]
    if later:
        return f"{text!r} uses {', '.join(later)} before its let"
    if unknown:
        return f"{text!r} uses {', '.join(unknown)}, neither a symbol nor an earlier let"
    try:
        compile_expression(text, set(known))
    except ArtifactError as e:
        return str(e)
    return None


def _evaluate(text: str, values: dict[str, int], names: frozenset[str], where: str, field: str = "") -> int:
    """`text` at `values`; an ArtifactError naming the expression and where it is when it has no value."""
    try:
        return evaluate_expression(text, values, names)
    except ArtifactError as e:
        problem = expression_problem(text, names) or str(e)
    except NameError as e:  # a let read before its own
        problem = f"{text!r} uses {e.name} before its let"
    except (ArithmeticError, TypeError, ValueError) as e:
        used = {name: values[name] for name in sorted(expression_names(text)) if name in values}
        problem = f"{text!r} has no value at {used} ({type(e).__name__}: {e})"
    raise ArtifactError(f"host plan, {where}{' ' + field if field else ''}: {problem}")


# ---------------------------------------------------------------- resolution

def bind_symbols(plan: dict, shapes) -> dict[str, int]:
    """Each symbol's size in a call: its (argument, dim) of `shapes`, the
    shapes of the tensors a call passes (the arguments that are no output:
    they come first, so an argument's index is its position)."""
    sizes = {}
    for name, (argument, dim) in (plan.get("symbols") or {}).items():
        shape = shapes[argument]
        if dim >= len(shape):
            raise InputMismatchError(f"{plan['arguments'][argument]['name']} has {len(shape)} dims; "
                                     f"its dim {dim} is the size {name}")
        sizes[name] = int(shape[dim])
    return sizes


def resolve_plan(plan: dict, sizes: dict[str, int]) -> dict:
    """The plan at these sizes of its symbols (`bind_symbols`): a static plan,
    version 1's format, with each let evaluated in order and every expression
    replaced by its value, the outputs' shapes included. A static plan is
    returned as it is."""
    if is_static(plan):
        return plan
    symbols = plan.get("symbols") or {}
    missing = [name for name in symbols if name not in sizes]
    if missing:
        raise InputMismatchError(f"no size given for {', '.join(missing)}")
    lets = plan.get("lets") or []
    names = frozenset(symbols) | {name for name, _ in lets}
    values = {name: int(sizes[name]) for name in symbols}
    for name, text in lets:
        values[name] = _evaluate(text, values, names, f"let {name}")
    known = dict(values)  # each expression's value, evaluated once: most are a name used again and again

    def resolver(where: str):
        def resolve(entry, field: str):
            if not isinstance(entry, str):
                return entry
            if entry not in known:
                known[entry] = _evaluate(entry, values, names, where, field)
            return known[entry]
        return resolve

    arguments = [{**argument, "shape": _map_list(argument["shape"], "shape", resolver(f"argument {index}"))}
                 for index, argument in enumerate(plan["arguments"])]
    steps = [map_integers(step, resolver(f"step {index} ({step.get('op')})"))
             for index, step in enumerate(plan["steps"])]
    static = {key: value for key, value in plan.items() if key not in ("symbols", "lets")}
    return {**static, "version": 1, "arguments": arguments, "steps": _taken(steps)}


def _taken(steps: list[dict]) -> list[dict]:
    """The steps these sizes take: a launch whose `when` (a bucket of sizes:
    one kernel per range of M, say) is 0 is left out, and `when` goes."""
    return [{key: value for key, value in step.items() if key != "when"} if "when" in step else step
            for step in steps if step.get("when", 1)]


# ---------------------------------------------------------------- validation

def _is_number(entry) -> bool:
    return isinstance(entry, int) and not isinstance(entry, bool)


def _elements(shape: list) -> int | None:
    """How many elements a shape holds; None where a size is an expression."""
    return math.prod(shape) if all(map(_is_number, shape)) else None


def _view_problems(where: str, view: dict, live: dict) -> list[str]:
    buffer = view["buffer"]
    if buffer not in live:
        return [f"{where}: buffer {buffer} is not live"]
    entries = [view["offset"], *view["sizes"], *view["strides"]]
    if live[buffer] is None or not all(map(_is_number, entries)):
        return []  # its bounds depend on the sizes of a call
    if any(s == 0 for s in view["sizes"]):
        return []
    extent = view["offset"] + sum((s - 1) * st for s, st in zip(view["sizes"], view["strides"]) if s > 0)
    if view["offset"] < 0 or extent >= live[buffer]:
        return [f"{where}: view of {buffer} reaches element {extent}, buffer has {live[buffer]}"]
    return []


def _symbol_problems(plan: dict) -> list[str]:
    """Each symbol must name the size of a dim of an argument a call passes."""
    problems = []
    arguments = plan["arguments"]
    for name, place in (plan.get("symbols") or {}).items():
        if not name.isidentifier() or name in FUNCTION_NAMES:
            problems.append(f"symbol {name!r} is not a usable name")
        elif not (isinstance(place, list) and len(place) == 2 and all(map(_is_number, place))):
            problems.append(f"symbol {name}: {place!r} is not [argument, dim]")
        elif not 0 <= place[0] < len(arguments):
            problems.append(f"symbol {name} reads argument {place[0]}; the plan has {len(arguments)}")
        elif arguments[place[0]].get("kind") == "output":
            problems.append(f"symbol {name} reads argument {place[0]}, an output")
        elif not 0 <= place[1] < len(arguments[place[0]]["shape"]):
            problems.append(f"symbol {name} reads dim {place[1]} of argument {place[0]}, "
                            f"which has {len(arguments[place[0]]['shape'])}")
        elif arguments[place[0]]["shape"][place[1]] != name:
            problems.append(f"symbol {name} reads argument {place[0]} dim {place[1]}, "
                            f"whose size is {arguments[place[0]]['shape'][place[1]]!r}")
    return problems


def _let_problems(plan: dict) -> list[str]:
    """Each let must be a new name, its expression over symbols and earlier lets."""
    problems = []
    known = set(plan.get("symbols") or {})
    lets = plan.get("lets") or []
    all_names = {let[0] for let in lets if isinstance(let, list) and len(let) == 2}
    for index, let in enumerate(lets):
        if not (isinstance(let, list) and len(let) == 2 and all(isinstance(part, str) for part in let)):
            problems.append(f"let {index}: {let!r} is not [name, expression]")
            continue
        name, text = let
        if not name.isidentifier() or name in FUNCTION_NAMES or name in known:
            problems.append(f"let {index}: {name!r} is not a new name")
        problem = expression_problem(text, known, all_names - known)
        if problem:
            problems.append(f"let {name}: {problem}")
        known.add(name)
    return problems


def _entry_problems(where: str, entry, known: frozenset[str], static: bool) -> list[str]:
    if _is_number(entry):
        return []
    if not isinstance(entry, str):
        return [f"{where}: {entry!r} is neither an integer nor an expression"]
    if static:
        return [f"{where}: {entry!r} is an expression, but the plan has no symbols or lets"]
    problem = _cached_problem(entry, known)
    return [f"{where}: {problem}"] if problem else []


@functools.lru_cache(maxsize=4096)  # a plan uses the same few expressions again and again
def _cached_problem(text: str, known: frozenset[str]) -> str | None:
    return expression_problem(text, known)


def validate_plan(plan: dict) -> list[str]:
    """Every problem found: buffers used before allocation or after free,
    views out of bounds, launches with bad shapes, and in a dynamic plan
    symbols, lets and expressions using names they cannot. Empty means
    valid. Bounds that depend on the sizes of a call are left unchecked
    (they are checked once resolved: a resolved plan is a static one)."""
    if plan.get("version", 1) not in VERSIONS:
        return [f"plan version {plan.get('version')}; this runtime reads versions {', '.join(map(str, VERSIONS))}"]
    static = is_static(plan)
    symbols = frozenset(plan.get("symbols") or {})
    names = symbols | {let[0] for let in plan.get("lets") or [] if isinstance(let, list) and len(let) == 2}
    problems = _symbol_problems(plan) + _let_problems(plan)
    for index, argument in enumerate(plan["arguments"]):
        for dim, size in enumerate(argument["shape"]):
            problems += _entry_problems(f"argument {index} shape[{dim}]", size, symbols, static)

    def check(where: str):
        def entry(value, field: str):
            problems.extend(_entry_problems(f"{where} {field}", value, names, static))
            return value
        return entry

    live = {f"arg{i}": _elements(a["shape"]) for i, a in enumerate(plan["arguments"])}
    constants = set()  # global constants live for the whole run
    for index, step in enumerate(plan["steps"]):
        where = f"step {index} ({step.get('op')})"
        op = step.get("op")
        if op not in KNOWN_OPS:
            problems.append(f"{where}: unknown op")
            continue
        map_integers(step, check(where))
        if op in ("alloc", "constant"):
            if step["buffer"] in live:
                problems.append(f"{where}: {step['buffer']} allocated twice")
            live[step["buffer"]] = _elements(step["shape"])
            if op == "constant":
                constants.add(step["buffer"])
        elif op == "free":
            if step["buffer"] not in live:
                problems.append(f"{where}: {step['buffer']} freed but not live")
            live.pop(step["buffer"], None)
        elif op == "copy":
            problems += _view_problems(where, step["src"], live) + _view_problems(where, step["dst"], live)
            if _differ(step["src"]["sizes"], step["dst"]["sizes"]):
                problems.append(f"{where}: copy between shapes {step['src']['sizes']} and {step['dst']['sizes']}")
        elif op == "launch":
            problems += _launch_problems(where, step, live)
    kept = {step["buffer"] for step in plan["steps"] if step.get("op") == "alloc" and step.get("once")}
    leaked = sorted(b for b in live if not b.startswith("arg") and b not in constants and b not in kept)
    if leaked:
        problems.append(f"buffers never freed: {', '.join(leaked)}")
    return problems + _once_problems(plan, constants, kept)


STATE_KINDS = ("parameter", "buffer")


def _once_problems(plan: dict, constants: set[str], kept: set[str]) -> list[str]:
    """Once steps (host_plan.mark_once_steps) must be allocations, frees,
    launches or copies whose sizes are numbers (the same at every call of a
    dynamic plan), touching only the state, constants and the buffers once
    steps allocate."""
    once = [(index, step) for index, step in enumerate(plan["steps"]) if step.get("once")]
    state = {f"arg{i}" for i, a in enumerate(plan["arguments"]) if a.get("kind") in STATE_KINDS or a.get("state")}
    problems = []
    for index, step in once:
        where = f"step {index} ({step.get('op')})"
        if step.get("op") not in ("alloc", "free", "launch", "copy"):
            problems.append(f"{where}: a once step must be an alloc, free, launch or copy")
        elif depends_on_sizes(step):
            problems.append(f"{where}: once, but its sizes depend on the call (an expression)")
        elif step["op"] in ("free", "alloc") and step["buffer"] not in kept:
            problems.append(f"{where}: once, but {step['buffer']} is not allocated by a once step")
        elif step["op"] in ("launch", "copy"):
            strays = sorted(buffers_touched(step) - state - constants - kept)
            if strays:
                problems.append(f"{where}: a once step touches {', '.join(strays)}, neither state, "
                                "a constant nor a buffer once steps allocate")
    return problems


def depends_on_sizes(step: dict) -> bool:
    """Is any integer of `step` an expression over the call's sizes (version 2)?"""
    entries = []
    map_integers(step, lambda entry, field: entries.append(entry) or entry)
    return any(isinstance(entry, str) for entry in entries)


def buffers_touched(step: dict) -> set[str]:
    """The buffers a launch or copy step touches."""
    views = [step.get("src"), step.get("dst")] + [a.get("memref") for a in step.get("args", ())]
    return {view["buffer"] for view in views if view}


def _differ(sizes: list, other: list) -> bool:
    """Whether two shapes differ where that is known without a call's sizes."""
    return len(sizes) != len(other) or any(a != b for a, b in zip(sizes, other) if _is_number(a) and _is_number(b))


TENSOR_MAP_MAX_BOX = 256  # elements along each dim of one TMA copy


def _tensor_map_problems(where: str, arg: dict) -> list[str]:
    """What is wrong with a tensor-map argument: its box must give each dim
    of its view 1 to 256 elements; its dtype and swizzle the TMA's."""
    spec, view = arg["tensor_map"], arg.get("memref")
    if view is None:
        return [f"{where}: a tensor map of no buffer"]
    box = spec.get("box", [])
    if len(box) != len(view["sizes"]) or not all(_is_number(b) and 1 <= b <= TENSOR_MAP_MAX_BOX for b in box):
        return [f"{where}: tensor map box {box} for a {len(view['sizes'])}-d view"]
    if spec.get("dtype") not in TENSOR_MAP_ELEMENTS or spec.get("swizzle") not in TENSOR_MAP_SWIZZLES:
        return [f"{where}: tensor map of {spec.get('dtype')} with swizzle {spec.get('swizzle')}"]
    return _im2col_problems(where, spec["im2col"], len(view["sizes"])) if "im2col" in spec else []


def _im2col_problems(where: str, im2col: dict, rank: int) -> list[str]:
    """What is wrong with an im2col map's part (kernels/tensor_maps.im2col_tensor_map) of a `rank`-d view."""
    corners = [im2col.get("lower"), im2col.get("upper")]
    if not 3 <= rank <= 5 or any(not isinstance(c, list) or len(c) != rank - 2 for c in corners):
        return [f"{where}: im2col corners {corners} for a {rank}-d view"]
    strides, counts = im2col.get("element_strides"), [im2col.get("channels"), im2col.get("pixels")]
    if not isinstance(strides, list) or len(strides) != rank or not all(_is_number(s) and 1 <= s <= 8 for s in strides):
        return [f"{where}: im2col element strides {strides} for a {rank}-d view"]
    if not all(_is_number(c) and 1 <= c <= TENSOR_MAP_MAX_BOX for c in counts):
        return [f"{where}: im2col copies of {counts[0]} channels x {counts[1]} pixels"]
    return []


def _launch_problems(where: str, step: dict, live: dict) -> list[str]:
    problems = []
    grid, block = step["grid"], step["block"]
    numbers = [n for n in grid + block if _is_number(n)]
    if len(grid) != 3 or len(block) != 3 or (numbers and min(numbers) < 1):
        problems.append(f"{where}: bad grid {grid} / block {block}")
    elif all(map(_is_number, block)) and math.prod(block) > MAX_THREADS_PER_BLOCK:
        problems.append(f"{where}: {math.prod(block)} threads per block")
    for k, arg in enumerate(step["args"]):
        if "tensor_map" in arg:
            problems += _tensor_map_problems(f"{where} args[{k}]", arg)
        if "memref" in arg:
            problems += _view_problems(where, arg["memref"], live)
        elif isinstance(arg.get("scalar"), str) and arg.get("type") not in INTEGER_SCALARS:
            problems.append(f"{where} args[{k}]: a {arg.get('type')} scalar cannot be the expression {arg['scalar']!r}")
    return problems
