"""Which kernels of the two tracks cover the same torch ops.

Both tracks name each op by a source key ('aten.addmm @ zoo.py:116 >
zoo.py:99', locations.source_key). Two keys name the same op when their ops
agree (after Inductor's decompositions: var_mean and rsqrt are a layer norm)
and their model frames agree: the same innermost frame, and one frame list
inside the other (Dynamo keeps wrapper frames, such as decorators, that
torch.export's stack traces drop). Lines where one list only contains the
other count half: one trace may stop at the call into a library.

Each twintrack kernel sits beside the Inductor kernel it resembles most: the
most ops in common, then the most alike model lines. A group is one Inductor
kernel and the twintrack kernels beside it, or a kernel of either track that
resembles none; groups run in launch order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from ..inductor.graph_nodes import VIEW_OPS
from ...locations import stack_trace_source_key

TRACKS = ("twintrack", "inductor")

# Ops Inductor's decompositions produce, by the op twintrack keeps whole.
_DECOMPOSED_FROM = {"var_mean": "native_layer_norm", "rsqrt": "native_layer_norm",
                    "amax": "_softmax", "_safe_softmax": "_softmax"}
# Ops that run as matmul-like kernels in both tracks (library calls in Inductor).
_CONTRACTIONS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "convolution", "linear"}


@dataclass(frozen=True)
class _Key:
    op: str                      # 'addmm', decompositions folded back
    frames: tuple[str, ...]      # model frames, outermost first

    def same_lines(self, other: "_Key") -> bool:
        short, long = sorted((self.frames, other.frames), key=len)
        return bool(short) and short[-1] == long[-1] and _is_subsequence(short, long)

    def lines_alike(self, other: "_Key") -> float:
        """1 for the same lines; 0.5 when one is a caller of the other (a
        stack trace may stop a frame early, at the call into a library)."""
        if self.same_lines(other):
            return 1.0
        short, long = sorted((self.frames, other.frames), key=len)
        return 0.5 if short and _is_subsequence(short, long) else 0.0

    def same_op(self, other: "_Key") -> bool:
        return self.op == other.op and self.same_lines(other)


@lru_cache(maxsize=None)
def _parse(key: str) -> _Key:
    op, _, frames = key.partition(" @ ")
    op = op.removeprefix("aten.")
    return _Key(_DECOMPOSED_FROM.get(op, op), tuple(frames.split(" > ")) if frames else ())


def _is_subsequence(short: tuple, long: tuple) -> bool:
    remaining = iter(long)
    return all(frame in remaining for frame in short)


def _keys(kernel: dict) -> list[_Key]:
    return [_parse(k) for k in kernel["source_keys"]]


def kernel_groups(kernels: dict[str, list[dict]]) -> list[dict]:
    """[{'twintrack': [indices], 'inductor': [indices]}, ...] in launch order."""
    mine, theirs = kernels["twintrack"], kernels["inductor"]
    assigned = _align([[_resemblance(a, b) for b in theirs] for a in mine], len(theirs))
    beside: dict[int, list[int]] = {b["index"]: [] for b in theirs}
    groups = []
    for kernel, choice in zip(mine, assigned):
        if choice is None:
            groups.append({"twintrack": [kernel["index"]], "inductor": []})
        else:
            beside[theirs[choice]["index"]].append(kernel["index"])
    groups += [{"twintrack": ours, "inductor": [index]} for index, ours in beside.items()]
    return sorted(groups, key=_launch_position(groups))


def _align(scores: list[list[float]], columns: int) -> list[int | None]:
    """Give each row (a twintrack kernel, in launch order) a column (an Inductor
    kernel) or none, columns never going back, for the largest total score:
    both tracks run the model's ops in about the same order, which settles
    ties such as two matmuls on one model line."""
    rows = len(scores)
    # best[i][j]: the largest total for rows i.. using columns j.. only.
    best = [[0.0] * (columns + 1) for _ in range(rows + 1)]
    for i in range(rows - 1, -1, -1):
        for j in range(columns - 1, -1, -1):
            take = scores[i][j] + best[i + 1][j] if scores[i][j] > 0 else 0.0
            best[i][j] = max(best[i + 1][j], best[i][j + 1], take)
        best[i][columns] = best[i + 1][columns]

    def takes(i: int, j: int) -> bool:
        """Giving row i column j is on an optimal path."""
        return scores[i][j] > 0 and best[i][j] == scores[i][j] + best[i + 1][j]

    choice, j = [], 0
    for i in range(rows):
        while j < columns and best[i][j] == best[i][j + 1] and not takes(i, j):
            j += 1  # column j is better left to later rows, or to none
        choice.append(j if j < columns and takes(i, j) else None)
    return choice


def _resemblance(a: dict, b: dict) -> float:
    """Ops in common first; then how alike the two kernels' model lines are
    (0..1), discounted when only one of the two is a contraction."""
    keys_a, keys_b = _keys(a), _keys(b)
    shared = sum(any(ka.same_op(kb) for kb in keys_b) for ka in keys_a)
    alike_a = sum(max((ka.lines_alike(kb) for kb in keys_b), default=0.0) for ka in keys_a)
    alike_b = sum(max((kb.lines_alike(ka) for ka in keys_a), default=0.0) for kb in keys_b)
    total = len(keys_a) + len(keys_b)
    alike = (alike_a + alike_b) / total if total else 0.0
    return shared + alike * (1.0 if _is_contraction(a) == _is_contraction(b) else 0.25)


def _is_contraction(kernel: dict) -> bool:
    return any(key.op in _CONTRACTIONS or "dot_product" in key.op for key in _keys(kernel))


def _launch_position(groups: list[dict]):
    """Order by first twintrack kernel; a group of Inductor's alone goes after
    the group of the Inductor kernel launched just before it."""
    position = {}
    last = -1.0
    for group in sorted(groups, key=lambda g: min(g["inductor"], default=float("inf"))):
        if group["twintrack"]:
            last = min(group["twintrack"])
            position[id(group)] = (last, 0)
        else:
            position[id(group)] = (last, 1)
    return lambda group: position[id(group)]


def op_graph(program: torch.export.ExportedProgram, kernels: dict[str, list[dict]]) -> dict:
    """The exported program's compute ops (views left out, edges bridged
    through them), and for each track the kernels that cover each op: by op
    key, else by model line."""
    nodes, ids, feeds = [], {}, {}
    for node in program.graph.nodes:
        producers = {i for a in node.all_input_nodes for i in feeds.get(a.name, ())}
        if node.op != "call_function":
            continue
        op = node.target._schema.name.replace("::", ".") if hasattr(node.target, "_schema") else "getitem"
        if op.removeprefix("aten.") in VIEW_OPS:
            feeds[node.name] = producers  # a view passes its producers on
            continue
        key = stack_trace_source_key(op, _original_trace(node))
        ids[node.name] = len(nodes)
        feeds[node.name] = {len(nodes)}
        nodes.append({"id": len(nodes), "label": op, "source": key.partition(" @ ")[2] if key else None,
                      "inputs": sorted(producers), **{track: _covering(key, kernels[track]) for track in TRACKS}})
    edges = [[producer, n["id"]] for n in nodes for producer in n.pop("inputs")]
    return {"nodes": nodes, "edges": edges}


def _original_trace(node: torch.fx.Node) -> str:
    """The stack trace without the op frame the frontend appends to it."""
    return "\n".join(line for line in (node.meta.get("stack_trace") or "").splitlines() if '"aten.' not in line)


def _covering(key: str | None, kernels: list[dict]) -> list[int]:
    if key is None:
        return []
    mine = _parse(key)
    same_op = [k["index"] for k in kernels if any(mine.same_op(other) for other in _keys(k))]
    return same_op or [k["index"] for k in kernels if any(mine.same_lines(other) for other in _keys(k))]
