"""One model trained a few steps through eager PyTorch, Inductor and
twintrack (both through torch.compile), from the same seed and batches:
tools/compare.py MODEL --training.

Per track: the first step (compiles included), the median later step, and
how far the losses and the final parameters are from eager float32 and from
eager float64 (harness.training: AdamW, the optimizer step in eager). Then
each track's kernels, forward graphs then backward graphs, twintrack's
beside Inductor's that compute the same torch ops at the same model lines
(matched as for inference, within forward and within backward).

MODEL is a training case (tools/train.py --list: bert, llama, resnet,
bert_layer, llama_layer, conv_block, with their own losses) or any model
tools/compile.py takes, trained on the squared error of its first output
against a fixed random target. On the GPU machine, which has no MLIR,
twintrack's graphs come from a compile cache filled elsewhere
(tools/train.py --compile-only) and carried over.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import torch

from ..training import CASES, TrainingCase, compare_track, eager_summary, train
from ..tracks import device_name
from .matching import kernel_groups

PASSES = ("forward", "backward")


@dataclass(frozen=True)
class TrainingCompareRequest:
    model: str
    device: str = "cpu"
    dtype: str | None = None
    steps: int = 5
    lr: float = 1e-3


def run_training_comparison(request: TrainingCompareRequest,
                            progress: Callable[[str], None] = lambda _: None) -> dict:
    from ... import dynamo_backend
    from ..inductor import captured_graphs

    case = training_case(request.model, request.dtype)
    dtype = getattr(torch, request.dtype or "float32")
    progress("eager")
    eager = train(case, None, request.steps, request.lr, dtype=dtype, device=request.device)
    progress("eager float64")
    exact = train(case, None, request.steps, request.lr, dtype=torch.float64, device=request.device)
    tracks = {"eager": eager_summary(eager, exact)}

    progress("inductor (torch.compile)")
    torch._dynamo.reset()
    runs = []
    inductor_graphs = captured_graphs(lambda: runs.append(
        train(case, "inductor", request.steps, request.lr, dtype=dtype, device=request.device)))
    tracks["inductor"] = {**compare_track(eager, exact, runs[0]), "graphs": len(inductor_graphs)}

    progress("twintrack (torch.compile)")
    torch._dynamo.reset()
    dynamo_backend.reset_stats()
    with dynamo_backend.recording_graphs() as records:
        run = train(case, "twintrack", request.steps, request.lr, dtype=dtype, device=request.device)
    stats = dynamo_backend.stats()
    tracks["twintrack"] = {**compare_track(eager, exact, run), "graphs": len(records),
                           "graphs_from_cache": stats.cache_hits, "fallbacks": list(stats.fallbacks)}
    tracks["twintrack"]["ok"] = tracks["twintrack"]["ok"] and not stats.fallbacks

    kernels = {"twintrack": _twintrack_kernels(records), "inductor": _inductor_kernels(inductor_graphs)}
    for name in ("inductor", "twintrack"):
        tracks[name]["kernel_count"] = {p: sum(k["pass"] == p for k in kernels[name]) for p in PASSES}
    return {
        "model": request.model, "description": case.description, "device": request.device,
        "dtype": request.dtype or "float32", "device_name": device_name(request.device),
        "date": date.today().isoformat(), "torch": torch.__version__, "training": True,
        "steps": request.steps, "lr": request.lr, "tracks": tracks,
        "kernels": kernels, "groups": [g for p in PASSES for g in _groups_of_pass(kernels, p)],
        "notes": _notes(request, tracks, kernels),
    }


def training_case(model: str, dtype: str | None) -> TrainingCase:
    """A named training case, or MODEL (as tools/compile.py takes it) on the
    squared error of its first output against a fixed random target."""
    if model in CASES:
        return CASES[model]
    from ...frontend.model_spec import load_user_model
    source = load_user_model(model, dtype)
    inputs = [x for x in source.example_inputs if isinstance(x, torch.Tensor)]
    with torch.no_grad():
        first = _first_output(source.module(*inputs))

    def batch(g: torch.Generator) -> dict:
        fresh = {f"x{i}": torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.dtype)
                 if x.is_floating_point() else x.clone() for i, x in enumerate(inputs)}
        return {**fresh, "target": torch.randn(first.shape, generator=g, dtype=torch.float64).to(first.dtype)}

    def loss(step: Callable, values: dict) -> torch.Tensor:
        out = _first_output(step(*(values[f"x{i}"] for i in range(len(inputs)))))
        return (out - values["target"]).square().mean()

    return TrainingCase(model, f"{model}, squared error of its first output", lambda: copy.deepcopy(source.module),
                        batch, loss)


def _first_output(outputs) -> torch.Tensor:
    flat, _ = torch.utils._pytree.tree_flatten(outputs)
    return next(x for x in flat if isinstance(x, torch.Tensor) and x.is_floating_point())


def _twintrack_kernels(records) -> list[dict]:
    """Every recorded graph's kernels, each named graph/kernel and marked with its pass."""
    kernels = []
    for record in records:
        graph_pass = "backward" if record.name.startswith("backward") else "forward"
        for kernel in record.kernels or []:
            kernels.append({**kernel, "name": f"{record.name}/{kernel['name']}", "pass": graph_pass,
                            "index": len(kernels)})
    return kernels


def _inductor_kernels(graphs) -> list[dict]:
    kernels, counts = [], {p: 0 for p in PASSES}
    for graph in graphs:
        graph_pass = "backward" if graph.backward else "forward"
        label = f"{graph_pass}_{counts[graph_pass]}"
        counts[graph_pass] += 1
        for kernel in graph.kernels:
            kernels.append({**kernel.as_dict(), "name": f"{label}/{kernel.name}", "pass": graph_pass,
                            "index": len(kernels)})
    return kernels


def _groups_of_pass(kernels: dict, graph_pass: str) -> list[dict]:
    """The kernel groups of one pass: a forward kernel is never matched with a backward one."""
    return kernel_groups({track: [k for k in kernels[track] if k["pass"] == graph_pass]
                          for track in ("twintrack", "inductor")})


def _notes(request: TrainingCompareRequest, tracks: dict, kernels: dict) -> list[str]:
    notes = [f"{request.steps} AdamW steps (lr {request.lr}) from one seed and the same batches on every track; "
             "the optimizer step runs in eager on each. The first step includes the compiles; the step time is the "
             "median of the others (forward, loss, backward and the optimizer step, wall clock).",
             "Losses: the worst step's relative difference; state: the largest absolute difference of a parameter "
             "or buffer after the last step. A track passes within 1e-4 / 1e-3 of eager float32, or no farther "
             "from eager float64 than twice eager float32's own drift.",
             "Kernels: forward graphs' first, then backward graphs'; each named graph/kernel."]
    if not kernels["twintrack"] and tracks["twintrack"]["graphs"]:
        notes.append("twintrack's graphs came from the compile cache without their kernel lists (CPU artifacts "
                     "keep none).")
    for name in ("inductor", "twintrack"):
        if tracks[name].get("fallbacks"):
            notes.append(f"{name}: graphs run as captured: {'; '.join(tracks[name]['fallbacks'])}")
    return notes
