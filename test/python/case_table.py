"""Case tables compiled in batches: the cases of one group of a table (a
dtype, say) are the output groups of one module, compiled once per session
through conftest's `compile_cache`, so fifty small cases cost one compile
instead of fifty. Each case stays a test of its own and reads its own
result. A batch that fails to compile or to run is not held against its
cases: each then builds alone, so a failure names its case."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable

import torch

import twintrack

from function_module import FunctionModule


def as_tuple(outputs) -> tuple:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


@dataclass(frozen=True)
class Case:
    """`function` compiled for `inputs` and run on `fresh` (default: `inputs`)."""
    function: Callable
    inputs: tuple
    fresh: tuple | None = None

    @property
    def run_inputs(self) -> tuple:
        return self.inputs if self.fresh is None else self.fresh


class Batch(torch.nn.Module):
    """Each case's function on its own slice of the flat inputs; all their outputs, flat."""

    def __init__(self, cases: list[Case]):
        super().__init__()
        self.functions = torch.nn.ModuleList(FunctionModule(case.function) for case in cases)  # their lines in traces
        self.arities = [len(case.inputs) for case in cases]

    def forward(self, *flat):
        outputs, start = [], 0
        for function, arity in zip(self.functions, self.arities, strict=True):
            outputs.extend(as_tuple(function(*flat[start:start + arity])))
            start += arity
        return tuple(outputs)


def flat_inputs(inputs_per_case) -> tuple:
    # clones: a tensor two cases share is two inputs of the batch, as it was of each case's module
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for inputs in inputs_per_case for x in inputs)


def compiled_outputs(cases: list[Case], target: str = "cpu") -> list[tuple]:
    """Each case's outputs on its run inputs, from one compile of all of them."""
    compiled = twintrack.compile(Batch(cases), flat_inputs(c.inputs for c in cases), target=target)
    flat = as_tuple(compiled(*(x for c in cases for x in c.run_inputs)))  # not copies: a test may check them after
    counts = [len(as_tuple(c.function(*c.run_inputs))) for c in cases]  # eager's output counts
    assert len(flat) == sum(counts), f"the batch returned {len(flat)} outputs, its cases {sum(counts)}"
    split, start = [], 0
    for count in counts:
        split.append(tuple(flat[start:start + count]))
        start += count
    return split


def gpu_lowered(cases: list[Case], to: str | None = None) -> list:
    """One lowering of all `cases` for the GPU (compile only), shared by each case."""
    lowered = twintrack.export(Batch(cases), flat_inputs(c.inputs for c in cases)).lower(to=to, target="gpu")
    return [lowered] * len(cases)


def by_dtype(name: str, case: Case) -> torch.dtype:
    """One batch per dtype of the first tensor input."""
    return next(x.dtype for x in case.inputs if isinstance(x, torch.Tensor))


class CaseTable:
    """Cases by name, batched by `group_of(name, case)` (default: one
    batch); `build(cases)` returns one result per case (default: the
    compiled outputs on the CPU)."""

    def __init__(self, key: Hashable, cases: dict[str, Case],
                 group_of: Callable[[str, Case], Hashable] = lambda name, case: None,
                 build: Callable[[list[Case]], list] = compiled_outputs):
        self.key, self.cases, self.group_of, self.build = key, cases, group_of, build

    def result(self, cache, name: str):
        """Case `name`'s result, from its group's batch (built once per session)."""
        group = self.group_of(name, self.cases[name])
        names = [n for n, case in self.cases.items() if self.group_of(n, case) == group]
        try:
            results = cache.get((self.key, group), lambda: self.build([self.cases[n] for n in names]))
        except Exception:  # the case's own build below says whether the failure is this case's
            return self.build([self.cases[name]])[0]
        return results[names.index(name)]
