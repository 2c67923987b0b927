"""Which kernels of the two tracks cover the same torch ops.

Both tracks name each op by a source key ('aten.addmm @ zoo.py:116 >
zoo.py:99', locations.source_key). Each twintrack kernel sits beside the
Inductor kernel it resembles most: the most op keys in common, then the
most alike set of model lines (the tracks decompose some ops differently:
twintrack keeps aten.native_layer_norm where Inductor has var_mean and
rsqrt). A group is one Inductor kernel and the twintrack kernels beside it,
or a kernel of either track that resembles none; groups run in launch order.
"""

from __future__ import annotations

import torch

from ..inductor.graph_nodes import VIEW_OPS
from ..locations import key_frames, stack_trace_source_key

TRACKS = ("twintrack", "inductor")


# Ops that run as matmul-like kernels in both tracks (library calls in Inductor).
_CONTRACTIONS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "convolution", "linear"}


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
    choice, j = [], 0
    for i in range(rows):
        while j < columns and best[i][j] == best[i][j + 1] and not (scores[i][j] > 0 and best[i][j] == scores[i][j] + best[i + 1][j]):
            j += 1
        if j < columns and scores[i][j] > 0 and best[i][j] == scores[i][j] + best[i + 1][j]:
            choice.append(j)
        else:
            choice.append(None)
    return choice


# Ops Inductor's decompositions produce, by the op twintrack keeps whole.
_DECOMPOSED_FROM = {"var_mean": "native_layer_norm", "rsqrt": "native_layer_norm",
                    "amax": "_softmax", "_safe_softmax": "_softmax"}


def _op_keys(kernel: dict) -> set[str]:
    keys = set()
    for key in kernel["source_keys"]:
        op, _, frames = key.partition(" @ ")
        whole = _DECOMPOSED_FROM.get(op.removeprefix("aten."))
        keys.add(f"aten.{whole} @ {frames}" if whole else key)
    return keys


def _resemblance(a: dict, b: dict) -> float:
    """Shared op keys first; then how alike the two sets of model lines are
    (0..1), discounted when only one of the two is a contraction."""
    shared = len(_op_keys(a) & _op_keys(b))
    lines_a = {key_frames(k) for k in a["source_keys"]}
    lines_b = {key_frames(k) for k in b["source_keys"]}
    union = lines_a | lines_b
    alike = len(lines_a & lines_b) / len(union) if union else 0.0
    return shared + alike * (1.0 if _is_contraction(a) == _is_contraction(b) else 0.25)


def _is_contraction(kernel: dict) -> bool:
    return any(key.partition(" @ ")[0].removeprefix("aten.") in _CONTRACTIONS or "dot_product" in key
               for key in kernel["source_keys"])


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
        nodes.append({"id": len(nodes), "label": op, "source": key_frames(key) if key else None,
                      "inputs": sorted(producers), **{track: _covering(key, kernels[track]) for track in TRACKS}})
    edges = [[producer, n["id"]] for n in nodes for producer in n.pop("inputs")]
    return {"nodes": nodes, "edges": edges}


def _original_trace(node: torch.fx.Node) -> str:
    """The stack trace without the op frame the frontend appends to it."""
    return "\n".join(line for line in (node.meta.get("stack_trace") or "").splitlines() if '"aten.' not in line)


def _covering(key: str | None, kernels: list[dict]) -> list[int]:
    if key is None:
        return []
    exact = [k["index"] for k in kernels if key in _op_keys(k)]
    return exact or [k["index"] for k in kernels if any(key_frames(key) == key_frames(s) for s in k["source_keys"])]
