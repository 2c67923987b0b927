"""Dynamic shapes: the dims a compile leaves open, and the checks a call makes.

A compile may leave some dims of its inputs open (`DynamicDim`: a name, a
range and a divisor). Every tensor the compiled function takes or returns
then has a shape whose entries are ints or expressions over those names
(`"batch"`, `"64*batch*seq"`, `"1 + ((seq - 3) // 2)"`), and one compile
serves every size in range.

A call binds each name to its input's size, checks it against the range and
the divisor, checks every other dim against its expression, and computes the
outputs' shapes from the same expressions (`ShapeGuard`, `concrete_shape`). A size outside what
the compile assumed is an InputMismatchError naming the dim and the range.

The `--dynamic` syntax (`parse_dynamic`):

    INPUT:DIM=NAME[LOW,HIGH]%MULTIPLE, ...

INPUT is the input's position or its name in the model's forward; `%MULTIPLE`
is optional; one NAME given to several dims makes them equal.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import asdict, dataclass

import torch

from .errors import ArtifactError, InputMismatchError, UsageError

# an expression of a shape entry may use these, and nothing else
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub, ast.UAdd)
_UNSIGNED = 2 ** 64  # index values are 64-bit: an unsigned comparison reads them modulo this


def _tdiv(a: int, b: int) -> int:
    """C's division, toward zero (arith.divsi); Python's // rounds down."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


# The host code's integer arithmetic (MLIR arith on index values), exact;
# a comparison is 0 or 1.
_FUNCTIONS = {
    "max": max, "min": min,
    "select": lambda condition, a, b: a if condition else b,
    "tdiv": _tdiv,
    "trem": lambda a, b: a - b * _tdiv(a, b),
    "ceildiv": lambda a, b: -(-a // b),
    "floordiv": lambda a, b: a // b,
    "lt": lambda a, b: int(a < b), "le": lambda a, b: int(a <= b),
    "gt": lambda a, b: int(a > b), "ge": lambda a, b: int(a >= b),
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
    "ult": lambda a, b: int(a % _UNSIGNED < b % _UNSIGNED), "ule": lambda a, b: int(a % _UNSIGNED <= b % _UNSIGNED),
    "ugt": lambda a, b: int(a % _UNSIGNED > b % _UNSIGNED), "uge": lambda a, b: int(a % _UNSIGNED >= b % _UNSIGNED),
}
_GLOBALS = {"__builtins__": {}, **_FUNCTIONS}  # what an expression's code sees besides the sizes
FUNCTION_NAMES = frozenset(_FUNCTIONS)  # names an expression may call, and no size may take


@dataclass(frozen=True)
class DynamicDim:
    input: int           # the model's tensor input, by position
    dim: int
    name: str
    low: int
    high: int
    multiple: int = 1

    def problem(self, size: int) -> str | None:
        """Why `size` is outside what the compile assumed, or None."""
        if self.low <= size <= self.high and size % self.multiple == 0:
            return None
        return f"is {size}; compiled for {self.describe()}"

    def describe(self) -> str:
        divisor = f", a multiple of {self.multiple}" if self.multiple > 1 else ""
        return f"{self.name} in [{self.low}, {self.high}]{divisor}"

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> "DynamicDim":
        try:
            dim = DynamicDim(int(data["input"]), int(data["dim"]), str(data["name"]), int(data["low"]),
                             int(data["high"]), int(data.get("multiple", 1)))
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"damaged 'dynamic' entry {data!r} ({type(e).__name__})") from None
        if not (dim.name.isidentifier() and 0 <= dim.low <= dim.high and dim.multiple >= 1):
            raise ArtifactError(f"damaged 'dynamic' entry {data!r}")
        return dim


# ---------------------------------------------------------------- the --dynamic syntax

_ENTRY = re.compile(r"\s*(?P<input>[A-Za-z_][\w]*|\d+)\s*:\s*(?P<dim>-?\d+)\s*=\s*(?P<name>[A-Za-z_]\w*)\s*"
                    r"\[\s*(?P<low>\d+)\s*,\s*(?P<high>\d+)\s*\]\s*(?:%\s*(?P<multiple>\d+))?\s*(?:,|$)")
SYNTAX = "INPUT:DIM=NAME[LOW,HIGH]%MULTIPLE, ... (for example 'x:0=batch[1,64],x:1=seq[1,2048]%8')"


def parse_dynamic(text: str, input_names: list[str], example_inputs: tuple[torch.Tensor, ...]) -> list[DynamicDim]:
    """The dims `text` leaves open, checked against the example inputs:
    each names an input (by position or by `input_names`) and a dim it
    has, a range holding the example's size, and one range per name."""
    dims, position = [], 0
    text = text.strip()
    while position < len(text):
        match = _ENTRY.match(text, position)
        if match is None:
            raise UsageError(f"--dynamic: cannot read {text[position:]!r}; expected {SYNTAX}")
        dims.append(_entry(match, input_names, example_inputs))
        position = match.end()
    if not dims:
        raise UsageError(f"--dynamic: no dims given; expected {SYNTAX}")
    check_dims(dims, example_inputs)
    return dims


def _entry(match: re.Match, input_names: list[str], example_inputs: tuple) -> DynamicDim:
    given = match["input"]
    if given.isdigit():
        index = int(given)
    elif given in input_names:
        index = input_names.index(given)
    else:
        raise UsageError(f"--dynamic: no input named {given!r} (inputs: {', '.join(input_names) or 'none'})")
    if index >= len(example_inputs):
        raise UsageError(f"--dynamic: input {index} does not exist (the model takes {len(example_inputs)})")
    rank = example_inputs[index].dim()
    dim = int(match["dim"])
    if not -rank <= dim < rank:
        raise UsageError(f"--dynamic: input {given} has {rank} dims; there is no dim {dim}")
    return DynamicDim(index, dim % rank, match["name"], int(match["low"]), int(match["high"]),
                      int(match["multiple"] or 1))


def check_dims(dims: list[DynamicDim], example_inputs: tuple) -> None:
    """Refuse a spec the example contradicts or that gives one name two ranges."""
    ranges: dict[str, DynamicDim] = {}
    for dim in dims:
        if dim.multiple < 1 or dim.low > dim.high:
            raise UsageError(f"--dynamic: {dim.describe()} is an empty range")
        size = example_inputs[dim.input].shape[dim.dim]
        problem = dim.problem(size)
        if problem:
            raise UsageError(f"--dynamic: input {dim.input} dim {dim.dim} of the example {problem}")
        first = ranges.setdefault(dim.name, dim)
        if (first.low, first.high, first.multiple) != (dim.low, dim.high, dim.multiple):
            raise UsageError(f"--dynamic: {dim.name} is given two ranges ({first.describe()}; {dim.describe()})")


# ---------------------------------------------------------------- shape expressions

def compile_expression(text: str, names: set[str]):
    """A shape entry's expression as a Python code object, after checking
    that it uses only integer arithmetic on `names`."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ArtifactError(f"the shape expression {text!r} is not an expression") from None
    for node in ast.walk(tree):
        allowed = isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Load, *_OPERATORS)) \
            or (isinstance(node, ast.Constant) and type(node.value) is int) \
            or (isinstance(node, ast.Name) and (node.id in names or node.id in _FUNCTIONS)) \
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS)
        if not allowed:
            raise ArtifactError(f"the shape expression {text!r} uses {type(node).__name__}, "
                                f"or a name outside {sorted(names)}")
    return compile(tree, "<shape>", "eval")


def is_dynamic(shape) -> bool:
    return any(isinstance(size, str) for size in shape)


@functools.lru_cache(maxsize=16384)  # a dynamic host plan holds thousands
def _code(text: str, names: frozenset[str]):
    return compile_expression(text, set(names))


def evaluate_expression(text: str, sizes: dict[str, int], names: frozenset[str] | None = None) -> int:
    """The expression's value at `sizes`, its code compiled once per text
    and `names` (the names it may use: by default those of `sizes`)."""
    return int(eval(_code(text, frozenset(sizes) if names is None else names), _GLOBALS, sizes))


def concrete_shape(shape, sizes: dict[str, int]) -> tuple[int, ...]:
    """`shape` with each expression evaluated at `sizes` (each name's size)."""
    if not is_dynamic(shape):
        return tuple(shape)
    names = frozenset(sizes)
    return tuple(size if isinstance(size, int) else evaluate_expression(size, sizes, names) for size in shape)


def random_sizes(dims: list[DynamicDim], generator: torch.Generator) -> dict[str, int]:
    """A size for each name, drawn uniformly from its range (its multiples)."""
    sizes = {}
    for dim in dims:
        if dim.name not in sizes:
            low, high = -(-dim.low // dim.multiple), dim.high // dim.multiple
            sizes[dim.name] = int(torch.randint(low, high + 1, (), generator=generator)) * dim.multiple
    return sizes


def parse_sizes(text: str, dims: list[DynamicDim]) -> dict[str, int]:
    """'batch=3,seq=17': each name's size, checked against its range."""
    by_name = {dim.name: dim for dim in dims}
    sizes = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = entry.partition("=")
        if name.strip() not in by_name or not value.strip().isdigit():
            raise UsageError(f"--sizes: cannot read {entry!r}; expected NAME=SIZE with NAME one of "
                             f"{', '.join(by_name) or 'none (the artifact has static shapes)'}")
        size, dim = int(value), by_name[name.strip()]
        if dim.problem(size):
            raise UsageError(f"--sizes: {dim.name} {dim.problem(size)}")
        sizes[dim.name] = size
    return sizes


class ShapeGuard:
    """The dims one compiled function left open, at the positions of its
    arguments: `bind` checks a call's arguments and returns each name's size
    (which `concrete_shape` evaluates every shape at)."""

    def __init__(self, dims: list[DynamicDim], input_offset: int):
        self.dims, self.input_offset = dims, input_offset

    def bind(self, specs, tensors) -> dict[str, int]:
        """Each name's size in this call; raises InputMismatchError for a
        size out of its range."""
        sizes: dict[str, int] = {}
        for dim in self.dims:
            position = self.input_offset + dim.input
            tensor = tensors[position]
            if not isinstance(tensor, torch.Tensor) or tensor.dim() <= dim.dim:
                continue  # the caller's check of each spec names it
            size = int(tensor.shape[dim.dim])
            problem = dim.problem(size)
            if problem:
                raise InputMismatchError(f"{specs[position].name} dim {dim.dim} ({dim.name}) {problem}")
            sizes.setdefault(dim.name, size)
        return sizes
