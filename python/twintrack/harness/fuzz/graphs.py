"""Random op graphs as Python source, drawn with hypothesis.

A graph is built one op at a time. Each step draws an op family and its
operands (earlier values, or a fresh input shaped to broadcast or to
multiply) and its parameters, then evaluates the expression in eager on
the very input values the graph will be checked on (they are drawn from
the graph's seed as inputs are added, in make_inputs' order): if torch
rejects it (a dtype it does not take, shapes that do not broadcast, an
integer division by zero) the step is dropped. So every graph runs in
eager by construction, and hypothesis still shrinks by draws: fewer ops,
smaller shapes, simpler dtypes. (Meta tensors would be cheaper but accept
what CPU kernels refuse, such as log_softmax on uint8.)

The graph is kept as source text (a module class and a make_inputs
function): the very text a failure report prints is what the check runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8", "bool")

UNARY = ("torch.neg", "torch.abs", "torch.exp", "torch.log", "torch.sqrt", "torch.rsqrt", "torch.sin", "torch.cos",
         "torch.tanh", "torch.sigmoid", "torch.reciprocal", "torch.erf", "torch.floor", "torch.ceil", "torch.round",
         "torch.trunc", "torch.sign", "torch.square", "torch.relu", "torch.nn.functional.gelu",
         "torch.nn.functional.silu", "torch.logical_not", "torch.bitwise_not", "torch.isnan", "torch.expm1",
         "torch.log1p", "torch.nan_to_num")
BINARY = ("torch.add", "torch.sub", "torch.mul", "torch.div", "torch.maximum", "torch.minimum", "torch.eq",
          "torch.ne", "torch.lt", "torch.le", "torch.gt", "torch.ge", "torch.logical_and", "torch.logical_or",
          "torch.bitwise_and", "torch.bitwise_or", "torch.bitwise_xor", "torch.remainder", "torch.floor_divide",
          "torch.atan2", "torch.pow", "torch.fmod")
REDUCTIONS = ("sum", "mean", "amax", "amin", "prod", "argmax", "argmin", "any", "all", "logsumexp", "var")
SCALARS = ("2", "-1", "0.5", "3", "0")
FAMILIES = ("unary", "binary", "binary", "scalar", "reduce", "softmax", "cumsum", "matmul", "reshape", "permute",
            "transpose", "slice", "unsqueeze", "squeeze", "expand", "flip", "cat", "where", "cast", "clamp",
            "compare", "masked_fill")


def random_tensor(shape, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """One input, as make_inputs() in the generated source draws it (keep the two in step)."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 12, shape, generator=generator).to(dtype)
    return torch.randint(-6, 7, shape, generator=generator).to(dtype)


@dataclass
class Builder:
    """The graph so far: inputs (shape, dtype), lines of the forward, and
    each value's eager tensor on the graph's inputs."""
    seed: int = 0
    inputs: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    values: dict[str, torch.Tensor] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    def __post_init__(self):
        self.generator = torch.Generator().manual_seed(self.seed)

    def add_input(self, shape, dtype: str) -> str:
        name = f"x{len(self.inputs)}"
        self.inputs.append((tuple(shape), dtype))
        self.values[name] = random_tensor(tuple(shape), getattr(torch, dtype), self.generator)
        return name

    def try_add(self, expression: str, operands: list[str]) -> bool:
        """Add `v = expression` if eager accepts it on the graph's values."""
        try:
            with torch.no_grad():
                value = eval(expression, {"torch": torch}, dict(self.values))  # noqa: S307 - our own text
        except Exception:
            return False
        if not isinstance(value, torch.Tensor) or value.numel() == 0 or value.numel() > 4096:
            return False
        name = f"v{len(self.lines)}"
        self.lines.append(f"{name} = {expression}")
        self.values[name] = value
        self.used.update(operands)
        return True

    def outputs(self) -> list[str]:
        """The last value and up to two other values nothing reads."""
        names = [n for n in self.values if n.startswith("v")]
        sinks = [n for n in names[:-1] if n not in self.used][-2:]
        return sinks + names[-1:]


shapes = st.lists(st.integers(1, 5), min_size=0, max_size=4).map(tuple)


def _broadcast_shape(draw, shape: tuple) -> tuple:
    """A shape that broadcasts with `shape`: some dims set to 1, maybe fewer dims."""
    dims = [1 if draw(st.booleans()) else d for d in shape]
    drop = draw(st.integers(0, len(dims)))
    return tuple(dims[drop:])


def _operand(draw, b: Builder, shape: tuple) -> str:
    """An earlier value, or a fresh input that broadcasts against `shape`."""
    if draw(st.booleans()):
        return draw(st.sampled_from(sorted(b.values)))
    return b.add_input(_broadcast_shape(draw, shape), draw(st.sampled_from(DTYPES)))


def _dim(draw, value: torch.Tensor) -> int:
    return draw(st.integers(-max(value.dim(), 1), max(value.dim(), 1) - 1))


def draw_step(draw, b: Builder) -> None:
    """One op of a random family on a random earlier value."""
    family = draw(st.sampled_from(FAMILIES))
    a = draw(st.sampled_from(sorted(b.values)))
    value = b.values[a]
    expression, operands = STEPS[family](draw, b, a, value)
    b.try_add(expression, operands)


def _unary(draw, b, a, value):
    return f"{draw(st.sampled_from(UNARY))}({a})", [a]


def _binary(draw, b, a, value):
    other = _operand(draw, b, tuple(value.shape))
    operands = [a, other] if draw(st.booleans()) else [other, a]
    return f"{draw(st.sampled_from(BINARY))}({operands[0]}, {operands[1]})", operands


def _scalar(draw, b, a, value):
    return f"{draw(st.sampled_from(BINARY))}({a}, {draw(st.sampled_from(SCALARS))})", [a]


def _reduce(draw, b, a, value):
    op, keepdim = draw(st.sampled_from(REDUCTIONS)), draw(st.booleans())
    if draw(st.integers(0, 4)) == 0 and op in ("sum", "amax", "any", "prod", "mean"):
        return f"torch.{op}({a})", [a]
    return f"torch.{op}({a}, dim={_dim(draw, value)}, keepdim={keepdim})", [a]


def _softmax(draw, b, a, value):
    fn = draw(st.sampled_from(("torch.softmax", "torch.log_softmax")))
    return f"{fn}({a}, dim={_dim(draw, value)})", [a]


def _cumsum(draw, b, a, value):
    fn = draw(st.sampled_from(("torch.cumsum", "torch.cumprod")))
    return f"{fn}({a}, dim={_dim(draw, value)})", [a]


def _matmul(draw, b, a, value):
    k = value.shape[-1] if value.dim() else 1
    shape = (k, draw(st.integers(1, 6))) if draw(st.booleans()) or value.dim() < 2 else (k,)
    other = b.add_input(shape, draw(st.sampled_from((str(value.dtype).removeprefix("torch."),) + DTYPES)))
    return f"torch.matmul({a}, {other})", [a, other]


def _reshape(draw, b, a, value):
    shape = list(value.shape)
    choice = draw(st.integers(0, 2))
    if choice == 0 or len(shape) < 2:
        target = [-1]
    elif choice == 1:
        i = draw(st.integers(0, len(shape) - 2))
        target = shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:]
    else:
        target = [1] + shape
    return f"{a}.reshape({tuple(target)})", [a]


def _permute(draw, b, a, value):
    order = draw(st.permutations(list(range(value.dim()))))
    return f"{a}.permute({tuple(order)})", [a]


def _transpose(draw, b, a, value):
    return f"{a}.transpose({_dim(draw, value)}, {_dim(draw, value)})", [a]


def _slice(draw, b, a, value):
    if value.dim() == 0:
        return f"{a}[None]", [a]
    d = draw(st.integers(0, value.dim() - 1))
    size = value.shape[d]
    start, step = draw(st.integers(0, size - 1)), draw(st.integers(1, 2))
    index = ", ".join([":"] * d + [f"{start}::{step}"])
    return f"{a}[{index}]", [a]


def _unsqueeze(draw, b, a, value):
    return f"{a}.unsqueeze({draw(st.integers(-value.dim() - 1, value.dim()))})", [a]


def _squeeze(draw, b, a, value):
    return f"{a}.squeeze({_dim(draw, value)})", [a]


def _expand(draw, b, a, value):
    target = [draw(st.integers(1, 3)) if d == 1 else d for d in value.shape]
    return f"{a}.expand({tuple(target)})", [a]


def _flip(draw, b, a, value):
    return f"torch.flip({a}, ({_dim(draw, value)},))", [a]


def _cat(draw, b, a, value):
    other = draw(st.sampled_from(sorted(b.values)))
    fn = draw(st.sampled_from(("torch.cat", "torch.stack")))
    return f"{fn}([{a}, {other}], dim={_dim(draw, value)})", [a, other]


def _where(draw, b, a, value):
    other = _operand(draw, b, tuple(value.shape))
    condition = draw(st.sampled_from(sorted(b.values)))
    cond = condition if b.values[condition].dtype == torch.bool else f"{condition} > 0"
    return f"torch.where({cond}, {a}, {other})", [a, other, condition]


def _cast(draw, b, a, value):
    return f"{a}.to(torch.{draw(st.sampled_from(DTYPES))})", [a]


def _clamp(draw, b, a, value):
    low, high = draw(st.sampled_from(("-1", "0", "None"))), draw(st.sampled_from(("1", "2", "None")))
    if low == high == "None":
        low = "0"
    return f"torch.clamp({a}, min={low}, max={high})", [a]


def _compare(draw, b, a, value):
    return f"({a} {draw(st.sampled_from(('>', '<', '==', '!=', '>=')))} {draw(st.sampled_from(SCALARS))})", [a]


def _masked_fill(draw, b, a, value):
    return f"{a}.masked_fill({a} > 0, {draw(st.sampled_from(SCALARS))})", [a]


STEPS = {"unary": _unary, "binary": _binary, "scalar": _scalar, "reduce": _reduce, "softmax": _softmax,
         "cumsum": _cumsum, "matmul": _matmul, "reshape": _reshape, "permute": _permute, "transpose": _transpose,
         "slice": _slice, "unsqueeze": _unsqueeze, "squeeze": _squeeze, "expand": _expand, "flip": _flip,
         "cat": _cat, "where": _where, "cast": _cast, "clamp": _clamp, "compare": _compare,
         "masked_fill": _masked_fill}


@st.composite
def graph_sources(draw, min_ops: int = 3, max_ops: int = 12) -> str:
    """A random graph of min_ops..max_ops ops (fewer where steps were
    dropped, at least one), as the Python source `source_of` writes."""
    b = Builder(seed=draw(st.integers(0, 2**16)))
    b.add_input(draw(shapes), draw(st.sampled_from(DTYPES)))
    steps = draw(st.integers(min_ops, max_ops))
    for _ in range(steps):
        draw_step(draw, b)
    if not b.lines:
        b.try_add(f"torch.neg({'x0'})", ["x0"]) or b.try_add("x0.to(torch.int32)", ["x0"])
    return source_of(b, b.seed)


def source_of(b: Builder, seed: int) -> str:
    """A self-contained script: the module, make_inputs(), and a __main__ that
    compiles it with twintrack and compares it with eager."""
    arguments = ", ".join(f"x{i}" for i in range(len(b.inputs)))
    body = "\n".join(f"        {line}" for line in b.lines)
    specs = ", ".join(f"({shape!r}, torch.{dtype})" for shape, dtype in b.inputs)
    outputs = b.outputs()
    returned = outputs[0] if len(outputs) == 1 else "(" + ", ".join(outputs) + ",)"
    return f'''import torch


class Fuzzed(torch.nn.Module):
    def forward(self, {arguments}):
{body}
        return {returned}


INPUTS = [{specs}]


def make_inputs(seed={seed}):
    """Normal floats, small signed ints, bytes and bools, from one seed."""
    g = torch.Generator().manual_seed(seed)
    tensors = []
    for shape, dtype in INPUTS:
        if dtype.is_floating_point:
            tensors.append(torch.randn(shape, generator=g).to(dtype))
        elif dtype == torch.bool:
            tensors.append(torch.randint(0, 2, shape, generator=g).bool())
        elif dtype == torch.uint8:
            tensors.append(torch.randint(0, 12, shape, generator=g).to(dtype))
        else:
            tensors.append(torch.randint(-6, 7, shape, generator=g).to(dtype))
    return tuple(tensors)


if __name__ == "__main__":
    import twintrack
    inputs = make_inputs()
    print("eager:", Fuzzed()(*inputs))
    print("twintrack:", twintrack.compile(Fuzzed(), inputs)(*inputs))
'''
