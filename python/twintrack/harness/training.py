"""Training through torch.compile, step by step against eager: the same
model (same seed, same weights), the same batches, AdamW in eager for every
track. Each step's loss and the final parameters and buffers are compared
with eager's, and with eager's in float64: over tens of steps AdamW can
amplify a rounding difference (a gradient near zero whose sign flips), so
eager float32 itself drifts from float64. A track passes when it is within
the tolerances of eager float32, or no farther from float64 than twice
eager float32's own drift.

The cases are Hugging Face models from small configs, each called with its
labels so that it returns its own loss: BERT (masked-LM), a LLaMA decoder
(causal-LM) and a ResNet (classification; batch norm in train mode, so its
running statistics change); and, for machines without Hugging Face (the
GPU machine), the at-scale set's BERT and LLaMA layers (harness/at_scale.py)
with a squared-error loss. Dropout is off: eager and a compiled graph draw
their random numbers differently, so dropout would make the runs diverge
by design, not by a compiler's error.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

LOSS_RTOL = 1e-4    # each step's loss against eager's, relative
STATE_ATOL = 1e-3   # the final parameters and buffers against eager's, absolute
# Under bfloat16 autocast eager rounds each op's result to bfloat16 (8 bits
# of mantissa: 4e-3 relative) where a fused kernel keeps f32, so losses
# differ by that much; a parameter whose gradient is near zero can take
# AdamW steps (lr each) of the other sign.
AUTOCAST_LOSS_RTOL = 1e-2
AUTOCAST_STATE_ATOL = 2e-2


def _own_loss(step: Callable, batch: dict) -> torch.Tensor:
    """A Hugging Face model called with its labels returns its loss."""
    return step(**batch).loss


def _squared_error(step: Callable, batch: dict) -> torch.Tensor:
    return (step(batch["x"]) - batch["target"]).square().mean()


def _cross_entropy(step: Callable, batch: dict) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(step(batch["pixel_values"]), batch["labels"])


@dataclass(frozen=True)
class TrainingCase:
    name: str
    description: str
    build: Callable[[], torch.nn.Module]                 # the model, seeded by the caller
    batch: Callable[[torch.Generator], dict]              # one step's inputs, labels or target included
    loss: Callable[[Callable, dict], torch.Tensor] = _own_loss  # the step's loss, from the (compiled) model


def _bert() -> torch.nn.Module:
    import transformers
    config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(config)


def _llama() -> torch.nn.Module:
    import transformers
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config)


def _resnet() -> torch.nn.Module:
    import transformers
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                                       num_labels=4)
    return transformers.ResNetForImageClassification(config)


def _bert_layer() -> torch.nn.Module:
    from .at_scale import bert_layer
    return bert_layer(dim=64, heads=4, ffn=256)[0]


def _llama_layer() -> torch.nn.Module:
    from .at_scale import llama_layer
    return llama_layer(seq=32, dim=64, heads=4, kv_heads=2, ffn=176)[0]


def _conv_block() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))


def _hidden_states(g: torch.Generator) -> dict:
    return {"x": torch.randn(2, 32, 64, generator=g), "target": torch.randn(2, 32, 64, generator=g)}


def _tokens(g: torch.Generator) -> dict:
    ids = torch.randint(0, 128, (2, 16), generator=g)
    return {"input_ids": ids, "labels": ids}


def _images(g: torch.Generator, size: int = 32) -> dict:
    return {"pixel_values": torch.randn(4, 3, size, size, generator=g), "labels": torch.randint(0, 4, (4,), generator=g)}


def _small_images(g: torch.Generator) -> dict:
    return _images(g, 16)


CASES = {case.name: case for case in (
    TrainingCase("bert", "Hugging Face BERT, masked-LM loss (2 layers, 32 wide, 2 x 16 tokens)", _bert, _tokens),
    TrainingCase("llama", "Hugging Face LLaMA decoder, causal-LM loss (2 layers, 32 wide, GQA 4/2 heads)", _llama,
                 _tokens),
    TrainingCase("resnet", "Hugging Face ResNet, classification loss, batch norm in train mode (4 x 3 x 32 x 32)",
                 _resnet, _images),
    TrainingCase("bert_layer", "a BERT encoder layer (post-norm, GELU MLP; 64 wide, 2 x 32 tokens), squared error",
                 _bert_layer, _hidden_states, _squared_error),
    TrainingCase("llama_layer", "a LLaMA decoder layer (RMSNorm, rotary, causal GQA 4/2 heads, SwiGLU; 64 wide, "
                 "2 x 32 tokens), squared error", _llama_layer, _hidden_states, _squared_error),
    TrainingCase("conv_block", "a convolution, batch norm in train mode, ReLU, pooled into a linear classifier "
                 "(4 x 3 x 16 x 16), cross-entropy", _conv_block, _small_images, _cross_entropy),
)}
HUGGING_FACE = ("bert", "llama", "resnet")  # need the transformers package


@dataclass
class TrackRun:
    """One track's run: each step's loss, its wall time, and the final state."""
    losses: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    state: list[torch.Tensor] = field(default_factory=list)


def _compiler(backend: str):
    """The backend for torch.compile: twintrack's by its function, since
    where the package is not installed (python/ on the path, as on a GPU
    machine) no entry point registers its name."""
    from ..dynamo_backend import twintrack_backend
    return twintrack_backend if backend == "twintrack" else backend


def train(case: TrainingCase, backend: str | None, steps: int, lr: float, seed: int = 0,
          dtype: torch.dtype = torch.float32, device: str = "cpu", options: dict | None = None,
          autocast: torch.dtype | None = None) -> TrackRun:
    """`steps` AdamW steps of the case's model, compiled with `backend`
    (None: eager; `options`: its torch.compile options), in `dtype`, on
    `device`, its forward under `autocast` to that dtype if given."""
    torch.manual_seed(seed)
    model = case.build().train().to(device=device, dtype=dtype)
    step_fn = torch.compile(model, backend=_compiler(backend), options=options) if backend else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    batches = torch.Generator().manual_seed(seed + 1)
    run = TrackRun()
    for _ in range(steps):
        batch = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
                 for k, v in case.batch(batches).items()}
        start = time.perf_counter()
        with torch.autocast(device, dtype=autocast) if autocast else contextlib.nullcontext():
            loss = case.loss(step_fn, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        run.step_seconds.append(time.perf_counter() - start)
        run.losses.append(loss.item())
    run.state = [t.detach().clone() for t in (*model.parameters(), *model.buffers())]
    return run


def distance(reference: TrackRun, other: TrackRun) -> dict:
    """The worst step's relative loss difference and the final state's largest absolute difference."""
    return {"loss": max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(other.losses, reference.losses)),
            "state": max(((a.double() - b.double()).abs().max().item() for a, b in zip(other.state, reference.state)),
                         default=0.0)}


def compare_track(eager: TrackRun, exact: TrackRun, other: TrackRun,
                  tolerances: tuple[float, float] = (LOSS_RTOL, STATE_ATOL)) -> dict:
    """A track against eager and against eager float64 (`exact`), and
    whether it passes (module docstring) within `tolerances` (loss relative, state absolute)."""
    loss_rtol, state_atol = tolerances
    to_eager, to_exact, drift = distance(eager, other), distance(exact, other), distance(exact, eager)
    near_eager = to_eager["loss"] <= loss_rtol and to_eager["state"] <= state_atol
    near_exact = to_exact["loss"] <= max(loss_rtol, 2 * drift["loss"]) and \
        to_exact["state"] <= max(state_atol, 2 * drift["state"])
    finite = all(math.isfinite(v) for v in other.losses)
    return {"losses": other.losses, "vs_eager": to_eager, "vs_float64": to_exact,
            "ok": finite and (near_eager or near_exact), **step_timing(other)}


def eager_summary(eager: TrackRun, exact: TrackRun) -> dict:
    """Eager float32's losses, its drift from float64 and its step times."""
    return {"losses": eager.losses, "vs_float64": distance(exact, eager), **step_timing(eager)}


def step_timing(run: TrackRun) -> dict:
    """The first step (compiles included) and the median of the others."""
    later = sorted(run.step_seconds[1:])
    return {"first_step_s": run.step_seconds[0], "step_s": later[len(later) // 2] if later else None}


def tolerances(autocast: torch.dtype | None) -> tuple[float, float]:
    """(loss relative, state absolute) a run is judged by."""
    return (AUTOCAST_LOSS_RTOL, AUTOCAST_STATE_ATOL) if autocast else (LOSS_RTOL, STATE_ATOL)


def run_case(case: TrainingCase, steps: int, lr: float, backends: tuple[str, ...], device: str = "cpu",
             autocast: torch.dtype | None = None, twintrack_options: dict | None = None) -> dict:
    """The case on eager and on each backend (under `autocast` if given; the
    float64 reference never is); for twintrack (its torch.compile options
    `twintrack_options`), its graph counts: a graph given to Inductor or run
    eagerly fails the run."""
    from .. import dynamo_backend
    eager = train(case, None, steps, lr, device=device, autocast=autocast)
    exact = train(case, None, steps, lr, dtype=torch.float64, device=device)
    row = {"name": case.name, "description": case.description, "steps": steps, "lr": lr,
           "eager": eager_summary(eager, exact)}
    for backend in backends:
        torch._dynamo.reset()
        dynamo_backend.reset_stats()
        options = twintrack_options if backend == "twintrack" else None
        run = train(case, backend, steps, lr, device=device, autocast=autocast, options=options)
        row[backend] = compare_track(eager, exact, run, tolerances(autocast))
        if backend == "twintrack":
            stats = copy.deepcopy(dynamo_backend.stats())
            row[backend].update(graphs_compiled=stats.compiled, graphs_from_cache=stats.cache_hits,
                                graphs_to_inductor=stats.inductor, fallbacks=stats.fallbacks)
            row[backend]["ok"] = row[backend]["ok"] and not stats.fallbacks and not stats.inductor
    return row


def fill_gpu_cache(case: TrainingCase, autocast: torch.dtype | None = None) -> int:
    """Compile the case's training graphs for the GPU into the compile cache
    (one step, run eagerly here: `compile_only`; under this machine's
    `autocast` policy if given), for a GPU machine without MLIR to load;
    how many graphs it holds for the case (compiled now or before)."""
    from .. import dynamo_backend
    torch._dynamo.reset()
    dynamo_backend.reset_stats()
    train(case, "twintrack", 1, 1e-3, options={"target": "gpu", "compile_only": True, "fallback": False},
          autocast=autocast)
    stats = dynamo_backend.stats()
    return stats.compiled + stats.cache_hits
