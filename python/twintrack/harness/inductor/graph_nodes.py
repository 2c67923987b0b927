"""What Inductor's post-grad FX graph says about each node: the torch op, its
source key (locations.source_key), and the bytes and flops it accounts for.
Kernels name their origins by node name; this table resolves them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

from ...locations import stack_trace_source_key

# Ops that only reinterpret memory: they move no data and do no math, and
# their stack traces would tie kernels to the producers they view.
VIEW_OPS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "squeeze",
            "unsqueeze", "split", "split_with_sizes", "slice", "select", "as_strided", "alias",
            "reinterpret_tensor", "getitem", "clone", "contiguous", "unbind"}


@dataclass(frozen=True)
class NodeInfo:
    name: str
    op: str                # 'aten.addmm'
    source: str | None     # 'aten.addmm at linear.py:134', as twintrack writes it
    source_key: str | None
    inputs: tuple[str, ...]
    users: tuple[str, ...]  # 'output' for a graph output
    origin_name: str        # the Dynamo-graph node it came from, as origin comments name it
    output_bytes: int
    flops: int

    @property
    def is_view(self) -> bool:
        return self.op.split(".")[-1] in VIEW_OPS


def node_table(graph: torch.fx.Graph) -> dict[str, NodeInfo]:
    """Every input and op of the graph, by node name."""
    return {node.name: _info(node) for node in graph.nodes if node.op in ("call_function", "placeholder")}


def boundary_bytes(origins: set[str], table: dict[str, NodeInfo]) -> int:
    """Bytes a kernel covering `origins` must read and write at least: the
    values it takes from outside and the values used outside it."""
    inputs = {i for name in origins for i in table[name].inputs if i not in origins and i in table}
    outputs = {name for name in origins if any(u not in origins for u in table[name].users)}
    return sum(table[name].output_bytes for name in inputs | outputs)


def _info(node: torch.fx.Node) -> NodeInfo:
    op = _op_name(node.target)
    trace = node.meta.get("stack_trace")
    inputs = tuple(a.name for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node))
    users = tuple("output" if u.op == "output" else u.name for u in node.users)
    from_node = node.meta.get("from_node")
    origin_name = from_node[0].name if from_node else node.name
    if node.op == "placeholder":
        return NodeInfo(node.name, "input", None, None, (), users, origin_name, _tensor_bytes(node.meta.get("val")), 0)
    return NodeInfo(node.name, op, _source(op, trace), stack_trace_source_key(op, trace), inputs, users,
                    origin_name, _tensor_bytes(node.meta.get("val")), _flops(node))


def _op_name(target) -> str:
    name = getattr(target, "__name__", str(target))
    if hasattr(target, "_schema"):  # an OpOverload: 'aten::addmm' -> 'aten.addmm'
        name = target._schema.name.replace("::", ".")
    return name


def _source(op: str, trace: str | None) -> str | None:
    """'aten.addmm at linear.py:134': the op at its innermost frame."""
    frames = [line.strip() for line in (trace or "").splitlines() if line.strip().startswith("File ")]
    if not frames:
        return None
    path, _, rest = frames[-1].removeprefix('File "').partition('", line ')
    return f"{op} at {path.rsplit('/', 1)[-1]}:{rest.split(',')[0]}"


def _tensor_bytes(value) -> int:
    tensors = [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _flops(node: torch.fx.Node) -> int:
    """FlopCounter's formula where torch has one (matmuls, convolutions,
    attention); otherwise an element per output (pointwise) or input (reduction)."""
    from torch.utils.flop_counter import flop_registry
    packet = getattr(node.target, "overloadpacket", None)
    values = pytree.tree_map(lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs))
    if packet in flop_registry:
        try:
            return int(flop_registry[packet](*values[0], **values[1], out_val=node.meta.get("val")))
        except Exception:  # a formula that does not take this overload's arguments
            return 0
    if _op_name(node.target).split(".")[-1] in VIEW_OPS:
        return 0
    largest = [t.numel() for t in pytree.tree_leaves(values) + pytree.tree_leaves(node.meta.get("val"))
               if isinstance(t, torch.Tensor)]
    return max(largest, default=0)
