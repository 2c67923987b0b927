"""The calling convention: the tensors the compiled function takes and
returns (TensorSpec), how its flat tensor results become what the module returned, and how its input mutations reach the
caller's tensors.

torch.export functionalizes a module: an in-place update of an input (or, in
train mode, of a buffer: our state is passed as inputs) becomes an extra
output, and the output node lists every leaf of the module's result, which
may hold the same tensor twice, an input itself, None or a Python number.
The compiled function returns each computed tensor once; this convention
records the rest:

- `leaves`: each leaf of the module's output, in pytree order: a result of
  the compiled function, one of its arguments (the module returned an input,
  or an input it updated in place: eager returns that very tensor), or a
  constant;
- `mutations`: which result is copied into which argument after the call;
- `out_spec`: the pytree structure the leaves go back into.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree

from .errors import ArtifactError, IndexOutOfRange, ProgramCheckFailed

JSON_CONSTANTS = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor the compiled function takes or returns, as the manifest records it."""
    name: str
    shape: tuple[int | str, ...]   # a size, or an expression over the dims a compile left open (dynamic_shapes)
    dtype: str          # torch dtype name without the 'torch.' prefix
    kind: str           # 'parameter', 'buffer', 'input' or 'output'
    # where the compiled function takes (or returns) it with its dims in this
    # order, the order they are stored in (frontend/fx_passes/storage_order.py)
    storage_order: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        stored = {} if self.storage_order is None else {"storage_order": list(self.storage_order)}
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "kind": self.kind, **stored}

    @staticmethod
    def from_json(data: dict) -> "TensorSpec":
        order = data.get("storage_order")
        return TensorSpec(data["name"], tuple(data["shape"]), data["dtype"], data["kind"],
                          None if order is None else tuple(int(d) for d in order))

    @staticmethod
    def of(name: str, tensor: torch.Tensor, kind: str, shape: tuple | None = None,
           storage_order: tuple[int, ...] | None = None) -> "TensorSpec":
        return TensorSpec(name, tuple(tensor.shape) if shape is None else shape,
                          str(tensor.dtype).removeprefix("torch."), kind, storage_order)

    def stored(self) -> "TensorSpec":
        """The spec as the compiled function takes it: the shape in storage
        order, the name saying so (an executable's mismatch message then
        reads in the same order as the shapes it shows)."""
        if self.storage_order is None:
            return self
        return TensorSpec(f"{self.name}, its dims stored in order {list(self.storage_order)}",
                          tuple(self.shape[d] for d in self.storage_order), self.dtype, self.kind)


@dataclass(frozen=True)
class OutputLeaf:
    kind: str            # 'result', 'argument' or 'constant'
    index: int = 0       # the result's or the argument's position
    value: object = None  # a constant leaf's value
    complex: bool = False  # a complex value, computed as its real pair (frontend/fx_passes/complex_pairs.py)
    length: int | None = None  # the result holding how many of its rows are valid (frontend/fx_passes/bounded_outputs.py)
    scalar: bool = False  # the module returned `.item()` of this one-element result
    storage_order: tuple[int, ...] | None = None  # the result holds its dims in this order (storage_order.py)

    def resolve(self, results: list, arguments: list):
        if self.kind == "constant":
            return self.value
        tensor = results[self.index] if self.kind == "result" else arguments[self.index]
        if self.storage_order is not None:  # eager's view of it, with eager's strides
            tensor = tensor.permute(inverse_order(self.storage_order))
        if self.length is not None:
            tensor = tensor.narrow(0, 0, int(results[self.length]))
        if self.scalar:
            return tensor.item()
        # (a complex argument returned is the caller's own tensor, complex already)
        return torch.view_as_complex(tensor) if self.complex and not tensor.is_complex() else tensor

    def to_json(self) -> dict:
        stored = {} if self.storage_order is None else {"storage_order": list(self.storage_order)}
        return {"kind": self.kind, "index": self.index, "value": self.value, "complex": self.complex,
                "length": self.length, "scalar": self.scalar, **stored}


@dataclass(frozen=True)
class Mutation:
    result: int     # the result holding the updated value
    argument: int   # the argument it is written into


@dataclass(frozen=True)
class Guard:
    result: int     # a 0-d bool result: the check failed (frontend/fx_passes/guards.py)
    kind: str       # 'division' or 'index'
    message: str

    def raise_if_violated(self, results: list[torch.Tensor]) -> None:
        if bool(results[self.result]):
            raise (IndexOutOfRange if self.kind == "index" else ProgramCheckFailed)(self.message)


@dataclass
class CallingConvention:
    out_spec: pytree.TreeSpec                       # the module's output structure
    leaves: list[OutputLeaf]
    mutations: list[Mutation] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    complex_arguments: list[int] = field(default_factory=list)  # taken as their real pairs (view_as_real)
    storage_orders: dict[int, tuple[int, ...]] = field(default_factory=dict)  # taken with dims in memory order

    def call(self, executable, arguments: list[torch.Tensor], taken: list[torch.Tensor] = ()):
        """`executable` (flat results) on the caller's arguments: what the
        module returns. `taken`: the leading arguments (a model's own state)
        already as the executable takes them (`executable_arguments`, once)."""
        return self.outputs(executable(*taken, *self.executable_arguments(arguments, len(taken))), arguments)

    def call_flat(self, executable, arguments: list[torch.Tensor], taken: list[torch.Tensor] = ()) -> list[torch.Tensor]:
        """`call`, the output's tensors flattened (`flat_outputs`)."""
        return self.flat_outputs(executable(*taken, *self.executable_arguments(arguments, len(taken))), arguments)

    def executable_arguments(self, arguments: list[torch.Tensor], first: int = 0) -> list[torch.Tensor]:
        """The tensors the executable takes: each complex argument as its real
        pair (a view: the executable reads the caller's memory; a lazily
        conjugated one is conjugated first, a copy), and each argument the
        compile saw stored in another order than its shape's with its dims
        permuted into that order (fx_passes/storage_order.py: a view, which
        the executable copies only where the caller's layout differs). From
        argument `first` on (`arguments` may end before the last: a model's
        state alone). A tensor of another rank than compiled is passed as it
        is, for the executable to name the mismatch."""
        if not self.complex_arguments and not self.storage_orders:
            return list(arguments[first:])
        taken = [torch.view_as_real(a.resolve_conj()) if i in self.complex_arguments and a.is_complex() else a
                 for i, a in enumerate(arguments[first:], first)]
        for position, order in self.storage_orders.items():
            if first <= position < first + len(taken) and taken[position - first].dim() == len(order):
                taken[position - first] = taken[position - first].permute(order)
        return taken

    def outputs(self, results: list[torch.Tensor], arguments: list[torch.Tensor]):
        """Check the guards, apply the mutations to `arguments` (the caller's
        tensors) and return the module's output structure."""
        return pytree.tree_unflatten(self._resolved(results, arguments), self.out_spec)

    def flat_outputs(self, results: list[torch.Tensor], arguments: list[torch.Tensor]) -> list[torch.Tensor]:
        """The output's tensors in pytree order, as eager's would be flattened,
        an `.item()` output as a 0-d tensor (one per entry of flat_specs)."""
        values = self._resolved(results, arguments)
        return [torch.as_tensor(value) if leaf.scalar else value
                for leaf, value in zip(self.leaves, values) if leaf.kind != "constant"]

    def _resolved(self, results: list[torch.Tensor], arguments: list[torch.Tensor]) -> list:
        for guard in self.guards:
            guard.raise_if_violated(results)
        for mutation in self.mutations:
            target = arguments[mutation.argument]
            if target.is_complex():  # the result is its real pair
                target = torch.view_as_real(target)
            with torch.no_grad():
                target.copy_(results[mutation.result].to(target.device))
        return [leaf.resolve(results, arguments) for leaf in self.leaves]

    def result_storage_orders(self) -> dict[int, tuple[int, ...]]:
        """The results returned with their dims in memory order, by result."""
        return {leaf.index: leaf.storage_order for leaf in self.leaves
                if leaf.kind == "result" and leaf.storage_order is not None}

    def flat_specs(self, result_specs: list, argument_specs: list) -> list:
        """The specs of `flat_outputs`' tensors, in its order."""
        return [result_specs[leaf.index] if leaf.kind == "result" else argument_specs[leaf.index]
                for leaf in self.leaves if leaf.kind != "constant"]

    def to_json(self) -> dict:
        return {"out_spec": _dumps(self.out_spec), "leaves": [leaf.to_json() for leaf in self.leaves],
                "mutations": [[m.result, m.argument] for m in self.mutations],
                "guards": [[g.result, g.kind, g.message] for g in self.guards],
                "complex_arguments": list(self.complex_arguments),
                "storage_orders": [[position, list(order)] for position, order in self.storage_orders.items()]}

    @staticmethod
    def from_json(data: dict, where: str) -> "CallingConvention":
        try:
            leaves = [OutputLeaf(d["kind"], int(d["index"]), d.get("value"), bool(d.get("complex", False)),
                                 None if d.get("length") is None else int(d["length"]), bool(d.get("scalar", False)),
                                 None if d.get("storage_order") is None else tuple(int(x) for x in d["storage_order"]))
                      for d in data["leaves"]]
            mutations = [Mutation(int(r), int(a)) for r, a in data["mutations"]]
            guards = [Guard(int(r), str(kind), str(message)) for r, kind, message in data.get("guards", [])]
            complex_arguments = [int(i) for i in data.get("complex_arguments", [])]
            storage_orders = {int(position): tuple(int(d) for d in order)
                              for position, order in data.get("storage_orders", [])}
            out_spec = pytree.treespec_loads(data["out_spec"])
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
            raise ArtifactError(f"{where}: damaged 'calling' section ({type(e).__name__}: {e})") from None
        return CallingConvention(out_spec, leaves, mutations, guards, complex_arguments, storage_orders)

    def check_against(self, results: int, arguments: int, where: str) -> None:
        """Refuse a convention that points past the results or the arguments."""
        bad = [leaf for leaf in self.leaves if leaf.kind not in ("result", "argument", "constant")
               or (leaf.kind == "result" and not 0 <= leaf.index < results)
               or (leaf.length is not None and not 0 <= leaf.length < results)
               or (leaf.kind == "argument" and not 0 <= leaf.index < arguments)]
        bad += [m for m in self.mutations if not (0 <= m.result < results and 0 <= m.argument < arguments)]
        bad += [g for g in self.guards if not 0 <= g.result < results]
        bad += [f"storage order {list(order)} of argument {position}" for position, order in self.storage_orders.items()
                if not 0 <= position < arguments or not _permutation(order)]
        bad += [leaf for leaf in self.leaves if leaf.storage_order is not None
                and (leaf.kind != "result" or not _permutation(leaf.storage_order))]
        if bad:
            raise ArtifactError(f"{where}: 'calling' refers to {bad[0]}, outside the "
                                f"{results} outputs and {arguments} arguments")

    @staticmethod
    def flat(results: int) -> "CallingConvention":
        """A tuple of the results as they are (artifacts from before the convention)."""
        spec = pytree.tree_structure(tuple(range(results)))
        return CallingConvention(spec, [OutputLeaf("result", i) for i in range(results)])

    @staticmethod
    def of_manifest(manifest: dict) -> "CallingConvention":
        """An artifact manifest's convention; a manifest built without one
        (by hand, in tests) returns its outputs as a flat tuple."""
        if "calling" not in manifest:
            return CallingConvention.flat(len(manifest["outputs"]))
        return CallingConvention.from_json(manifest["calling"], manifest.get("model", "artifact"))


class LoadedArtifact:
    """An artifact's executable (flat results) called through its calling
    convention: it returns what the model returns, on either target. One
    saved with its state (Compiled.save) also runs on the inputs alone."""

    def __init__(self, executable, calling: CallingConvention, state: list | None = None, input_count: int = 0):
        self.executable, self.calling = executable, calling
        self.state, self.input_count = state or [], input_count
        self._taken = (None, [])  # (the state list, its tensors as the executable takes them: views, made once)

    def _arguments(self, given: tuple) -> tuple[list, list]:
        """The call's arguments, and those of them already as the executable takes them."""
        if not self.state or len(given) != self.input_count:
            return list(given), []
        if self._taken[0] is not self.state:
            self._taken = (self.state, self.calling.executable_arguments(self.state))
        return [*self.state, *given], self._taken[1]

    @property
    def poison_outputs(self) -> bool:
        return self.executable.poison_outputs

    @poison_outputs.setter
    def poison_outputs(self, value: bool) -> None:
        self.executable.poison_outputs = value

    def __call__(self, *arguments: torch.Tensor):
        return self.calling.call(self.executable, *self._arguments(arguments))

    def flat(self, *arguments: torch.Tensor) -> list[torch.Tensor]:
        """The output's tensors in the order eager's output flattens to."""
        return self.calling.call_flat(self.executable, *self._arguments(arguments))


def inverse_order(order: tuple[int, ...]) -> list[int]:
    """The permutation that undoes `order`."""
    undo = [0] * len(order)
    for position, dim in enumerate(order):
        undo[dim] = position
    return undo


def _permutation(order) -> bool:
    return sorted(order) == list(range(len(order)))


def _dumps(spec: pytree.TreeSpec) -> str:
    """The structure as JSON; torch's named result tuples (torch.return_types,
    which pytree cannot serialize) saved as plain tuples: an artifact loaded
    later returns (values, indices) where the module returned sort's
    named pair."""
    try:
        return pytree.treespec_dumps(spec)
    except (NotImplementedError, TypeError, ValueError):
        placeholder = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        return pytree.treespec_dumps(pytree.tree_structure(_plain_tuples(placeholder)))


def _plain_tuples(value):
    """`value` with every tuple (named ones too), list and dict rebuilt as the plain type."""
    if isinstance(value, tuple):
        return tuple(_plain_tuples(v) for v in value)
    if isinstance(value, list):
        return [_plain_tuples(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_tuples(v) for k, v in value.items()}
    return value
