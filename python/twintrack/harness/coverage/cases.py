"""The cases of the coverage suite and the modules they become.

A case is one (OpInfo, dtype) or (ModuleInfo, dtype[, training]) pair,
named by a stable string id (`abs:float32`, `nn.functional.conv2d:bfloat16`,
`module:nn.BatchNorm2d.train:float32`) so that a report can be resumed and
an expected-status file can name cases. The samples of a case come from the
OpInfo's own sample_inputs under a fixed seed, so the same id gives the
same tensors in every process.

A sample becomes a module whose inputs are the sample's tensors (in the
order pytree flattens `(input, args, kwargs)`) and whose other arguments
(ints, dtypes, lists of sizes) are baked into the forward: torch.export
sees the op call exactly as the OpInfo writes it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

DTYPES = ("float32", "float16", "bfloat16", "int64", "int32", "uint8", "bool")
FLOAT_DTYPES = {"float32", "float16", "bfloat16"}
SAMPLE_SEED = 0

# Ops whose outputs are random or uninitialized: only shapes and dtypes
# can be compared with eager.
NONDETERMINISTIC = (
    "bernoulli", "normal", "rand_like", "randn_like", "randint_like", "randint", "rand", "randn",
    "uniform", "multinomial", "cauchy", "exponential", "geometric", "log_normal",
    "nn.functional.dropout", "nn.functional.rrelu", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "empty", "new_empty", "empty_like", "empty_strided",
    "empty_permuted", "new_empty_strided", "nn.Dropout", "nn.AlphaDropout", "nn.FeatureAlphaDropout",
    "nn.RReLU", "torch.empty",
)


# Ops that return the indices of their values, where eager leaves the order
# of equal values unspecified (sort without stable=True, topk, kthvalue,
# mode): (position of `dim` among the arguments, whether a `keepdim`
# argument can drop it). Any index that addresses the right value is right.
UNORDERED_TIES = {"sort": 1, "argsort": 1, "topk": 2, "kthvalue": 2, "mode": 1}


# Ops whose outputs at these positions hold eigenvectors as columns, each
# defined up to its sign (LAPACK picks one; the Jacobi sweeps may pick the
# other): compared after giving each column's largest entry a plus sign.
SIGN_FREE_COLUMNS = {"linalg.eigh": (1,)}


def with_column_signs_fixed(outputs: list, positions) -> list:
    """`outputs` with each column of those at `positions` scaled by the sign
    of its largest-magnitude entry."""
    fixed = list(outputs)
    for position in positions:
        columns = fixed[position]
        if columns.numel():
            largest = columns.abs().argmax(-2, keepdim=True)
            fixed[position] = columns * torch.gather(columns, -2, largest).sign()
    return fixed


@dataclass(frozen=True)
class Case:
    kind: str          # 'op' or 'module'
    name: str          # OpInfo display name (name[.variant]) or ModuleInfo name
    dtype: str
    training: bool = False

    @property
    def id(self) -> str:
        if self.kind == "module":
            return f"module:{self.name}{'.train' if self.training else ''}:{self.dtype}"
        return f"{self.name}:{self.dtype}"

    @property
    def label(self) -> str:
        """The row name in the tables: the op or module, without the dtype."""
        return self.id.rsplit(":", 1)[0]

    @property
    def shape_only(self) -> bool:
        """Random or uninitialized outputs: compare shapes and dtypes only."""
        return self.name.startswith(NONDETERMINISTIC)

    @property
    def sign_free_columns(self) -> tuple:
        return SIGN_FREE_COLUMNS.get(self.name, ()) if self.kind == "op" else ()

    @property
    def ties_unordered(self) -> bool:
        return self.kind == "op" and self.name in UNORDERED_TIES

    @staticmethod
    def parse(case_id: str) -> "Case":
        label, dtype = case_id.rsplit(":", 1)
        if label.startswith("module:"):
            name = label.removeprefix("module:")
            training = name.endswith(".train")
            return Case("module", name.removesuffix(".train"), dtype, training)
        return Case("op", label, dtype)


@contextlib.contextmanager
def reseeding_differently():
    """OpInfo runs its random ops through wrapper_set_seed, which seeds 42
    before each call, so eager repeats itself and hides that the op is
    random. Inside, every OpInfo module's wrapper seeds 43 instead."""
    import sys

    from torch.testing._internal.common_utils import freeze_rng_state
    from torch.testing._utils import wrapper_set_seed

    def with_another_seed(op, *args, **kwargs):
        with freeze_rng_state():
            torch.manual_seed(43)
            return op(*args, **kwargs)

    modules = [m for name, m in list(sys.modules.items())
               if name.startswith("torch.testing._internal") and getattr(m, "wrapper_set_seed", None) is wrapper_set_seed]
    for module in modules:
        module.wrapper_set_seed = with_another_seed
    try:
        yield
    finally:
        for module in modules:
            module.wrapper_set_seed = wrapper_set_seed


def display_name(op) -> str:
    """An OpInfo's name with its variant: what the tables call it."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@functools.cache
def op_index() -> dict:
    from torch.testing._internal.common_methods_invocations import op_db
    return {display_name(op): op for op in op_db}


@functools.cache
def module_index() -> dict:
    from torch.testing._internal.common_modules import module_db
    return {info.name: info for info in module_db}


def cpu_dtypes(info) -> set[str]:
    """The suite's dtypes that an OpInfo or ModuleInfo supports on the CPU."""
    dtypes = info.supported_dtypes("cpu") if hasattr(info, "supported_dtypes") else set(info.dtypes)
    return {str(d).removeprefix("torch.") for d in dtypes} & set(DTYPES)


def all_cases(dtypes=DTYPES, with_modules: bool = False, order: str = "dtype") -> list[Case]:
    """Every case, dtype-major by default: a partial run then covers every op
    at float32 before any at float16, the most useful prefix to stop at."""
    cases = [Case("op", name, d) for name, op in op_index().items() for d in dtypes if d in cpu_dtypes(op)]
    if with_modules:
        for name, info in module_index().items():
            modes = (False, True) if info.train_and_eval_differ else (False,)
            cases += [Case("module", name, d, t) for d in dtypes if d in cpu_dtypes(info) for t in modes]
    if order == "dtype":
        cases.sort(key=lambda c: DTYPES.index(c.dtype))  # stable: op order within a dtype
    return cases


def plain_structure(value):
    """torch.return_types (max, sort, topk...) as plain tuples: the suite
    checks the op, and a structseq output is a separate frontend question
    (the fuzzer and a dedicated case can ask it)."""
    if isinstance(value, tuple) and type(value).__module__ == "torch.return_types":
        return tuple(value)
    return value


class SampleModule(torch.nn.Module):
    """`fn(*args, **kwargs)` with the tensors of the arguments as inputs;
    a structseq result comes back as a tuple (plain_structure)."""

    def __init__(self, fn, spec, constants: list, tensor_slots: list[int]):
        super().__init__()
        self.fn, self.spec, self.constants, self.tensor_slots = fn, spec, constants, tensor_slots

    def arguments(self, *tensors) -> tuple[tuple, dict]:
        """The call's (args, kwargs) with `tensors` in their slots."""
        leaves = list(self.constants)
        for slot, tensor in zip(self.tensor_slots, tensors):
            leaves[slot] = tensor
        return pytree.tree_unflatten(leaves, self.spec)

    def forward(self, *tensors):
        args, kwargs = self.arguments(*tensors)
        return plain_structure(self.fn(*args, **kwargs))


def tie_axis(case: Case, sample: "Sample") -> tuple[torch.Tensor, int]:
    """(the sample's input, the dim) an unordered-ties op's indices address."""
    args, kwargs = sample.module.arguments(*sample.inputs)
    position = UNORDERED_TIES[case.name]
    return args[0], kwargs.get("dim", args[position] if len(args) > position else -1)


def addressed_values(case: Case, sample: "Sample", indices: torch.Tensor) -> torch.Tensor:
    """The values `indices` (an unordered-ties op's index output) pick out of
    the sample's input along the op's dim, shaped as the indices."""
    return values_at(*tie_axis(case, sample), indices)


def values_at(source: torch.Tensor, dim: int, indices: torch.Tensor) -> torch.Tensor:
    """The values of `source` that `indices` address along `dim`."""
    if source.dim() == 0:
        return source.expand(indices.shape)
    if indices.dim() < source.dim():  # keepdim=False
        return source.gather(dim, indices.unsqueeze(dim)).squeeze(dim)
    return source.gather(dim, indices)


def indices_address_values(case: Case, sample: "Sample", indices: torch.Tensor, values: torch.Tensor) -> bool:
    """Whether `indices` pick `values` out of the sample's input: true for
    every order of equal values (NaN addresses NaN)."""
    if indices.shape != values.shape or indices.dtype != torch.int64:
        return False
    picked = addressed_values(case, sample, indices)
    same = picked == values
    if values.is_floating_point():
        same = same | (picked.isnan() & values.isnan())
    return bool(same.all())


class TrainingWrapper(torch.nn.Module):
    """Keeps its inner module in the mode it was built in: twintrack.export
    puts the model in eval mode, which would hide training-mode behaviour."""

    def __init__(self, inner: torch.nn.Module, call):
        super().__init__()
        self.inner, self.call = inner, call

    def train(self, mode: bool = True):
        self.training = mode  # deliberately not passed on to `inner`
        return self

    def forward(self, *tensors):
        return self.call(self.inner, tensors)


@dataclass
class Sample:
    """One sample: a module, its inputs, and the float64 version of both
    (None where the case has no float64 reference)."""
    module: torch.nn.Module
    inputs: tuple
    module64: torch.nn.Module | None
    inputs64: tuple | None
    description: str


def split_arguments(args: tuple, kwargs: dict):
    """(spec, constant leaves, tensor slots, tensors) of a call's arguments."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    constants = [None if i in slots else leaf for i, leaf in enumerate(leaves)]
    return spec, constants, slots, tuple(leaves[i] for i in slots)


def widened(tensors: tuple) -> tuple:
    """Floating-point tensors as float64, the rest as they are."""
    return tuple(t.double() if t.is_floating_point() else t for t in tensors)


def samples(case: Case, limit: int) -> list[Sample]:
    """The first `limit` samples of a case, seeded."""
    torch.manual_seed(SAMPLE_SEED)
    if case.kind == "module":
        return _module_samples(case, limit)
    return _op_samples(case, limit)


def _op_samples(case: Case, limit: int) -> list[Sample]:
    op = op_index()[case.name]
    dtype = getattr(torch, case.dtype)
    has64 = case.dtype in FLOAT_DTYPES and torch.float64 in op.supported_dtypes("cpu")
    result = []
    for sample in itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), limit):
        spec, constants, slots, tensors = split_arguments((sample.input, *sample.args), dict(sample.kwargs))
        tensors = tuple(t.detach().clone() for t in tensors)
        module = SampleModule(op.op, spec, constants, slots)
        result.append(Sample(module, tensors, module if has64 else None,
                             widened(tensors) if has64 else None, _describe(tensors, constants)))
    return result


def _module_samples(case: Case, limit: int) -> list[Sample]:
    info = module_index()[case.name]
    dtype = getattr(torch, case.dtype)
    inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=False, training=case.training)
    has64 = case.dtype in FLOAT_DTYPES and torch.float64 in info.dtypes
    result = []
    for module_input in itertools.islice((m for m in inputs if m.forward_input is not None), limit):
        ctor, fwd = module_input.constructor_input, module_input.forward_input
        inner = info.module_cls(*ctor.args, **ctor.kwargs).to(dtype).train(case.training)
        spec, constants, slots, tensors = split_arguments(tuple(fwd.args), dict(fwd.kwargs))
        tensors = tuple(t.detach().clone() for t in tensors)
        call = _bound_call(spec, constants, slots)
        module = TrainingWrapper(inner, call)
        module64 = TrainingWrapper(copy.deepcopy(inner).double(), call) if has64 else None
        result.append(Sample(module, tensors, module64, widened(tensors) if has64 else None,
                             _describe(tensors, constants)))
    return result


def _bound_call(spec, constants, slots):
    """inner(*args, **kwargs) rebuilt from the forward's tensors."""
    def call(inner, tensors):
        leaves = list(constants)
        for slot, tensor in zip(slots, tensors):
            leaves[slot] = tensor
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return plain_structure(inner(*args, **kwargs))
    return call


def _describe(tensors: tuple, constants: list) -> str:
    """A short line naming the sample: its tensors' shapes and dtypes, its other arguments."""
    shapes = ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in tensors)
    others = ", ".join(repr(c) for c in constants if c is not None)
    text = f"({shapes})" + (f" with {others}" if others else "")
    return text if len(text) <= 160 else text[:157] + "..."
