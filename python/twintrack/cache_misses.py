"""Graphs a machine without MLIR looked up in the compile cache and did
not find, recorded there and compiled here.

A GPU machine without MLIR runs torch.compile(backend="twintrack") from a
copy of the compile cache. Where its capture differs from this machine's
(another torch, CUDA's autocast policy, a kernel op chosen by device), its
graphs miss. Each miss leaves `misses/KEY/`: the captured code
(`graph.py`) and the graph itself with its input specs and options
(`graph.pt`). Carried back here, `compile_misses` compiles each for its
target and stores it under the key the other machine looked up; carried
there again, the graphs hit.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

RECORD = "graph.pt"
CODE = "graph.py"
# What the other machine's run decided, not what the graph's code depends on.
_RUN_ONLY_OPTIONS = ("dump", "compile_only", "on_miss", "fallback")


@dataclass(frozen=True)
class MissOutcome:
    """One recorded miss after `compile_misses`: compiled (and stored), or why not."""
    key: str
    description: str
    seconds: float
    error: str | None = None


def record(key: str, gm: torch.fx.GraphModule, example_inputs: list, options, target: str, kind: str,
           state_inputs: tuple[int, ...] = ()) -> None:
    """Keep the missed graph under `key`: its code, and where it pickles,
    the graph with its inputs' specs (and which hold state), target, kind
    and options (tf32 as resolved here), so that a machine with MLIR can compile it."""
    from .compiler import compile_cache
    from .dynamo_backend import portable_code

    def fill(directory: Path) -> None:
        (directory / CODE).write_text(portable_code(gm))
        settings = dataclasses.replace(options, allow_tf32=options.tf32())
        portable = copy.deepcopy(gm)  # unpickling re-traces its code: a CUDA factory op would fail there
        on_this_machine(portable)
        record = {"graph": portable, "target": target, "kind": kind, "torch": torch.__version__,
                  "inputs": [(tuple(x.shape), tuple(x.stride()), x.dtype) for x in example_inputs],
                  "state_inputs": list(state_inputs),
                  "options": {name: value for name, value in dataclasses.asdict(settings).items()
                              if name not in _RUN_ONLY_OPTIONS},
                  "settings": settings.key_settings(target)}
        try:
            torch.save(record, directory / RECORD)
        except Exception:  # a graph that does not pickle still leaves its code to diff
            (directory / RECORD).unlink(missing_ok=True)
    compile_cache.store_miss(key, fill)


def compile_misses(progress=print) -> list[MissOutcome]:
    """Compile every recorded miss for its target into the cache's graphs,
    under the key it was looked up by, and remove the miss; a miss that
    fails to compile stays, with its error."""
    from .compiler import compile_cache
    outcomes = []
    for directory in compile_cache.misses():
        outcome = _compile_miss(directory)
        if outcome.error is None:
            compile_cache.remove_entry(directory)
        progress(f"{outcome.key}  {outcome.description}: " +
                 (f"compiled in {outcome.seconds:.1f} s" if outcome.error is None else f"not compiled: {outcome.error}"))
        outcomes.append(outcome)
    return outcomes


def _compile_miss(directory: Path) -> MissOutcome:
    from .compiler import compile_cache
    from .dynamo_backend import BackendOptions, GraphCompiler
    from .errors import brief_exception
    key, start = directory.name, time.perf_counter()
    if not (directory / RECORD).is_file():
        return MissOutcome(key, "a graph", 0.0, f"{RECORD} is absent (the graph did not pickle): only its code "
                                                f"({directory / CODE}) was kept")
    try:
        record = torch.load(directory / RECORD, weights_only=False, map_location="cpu")  # a GPU machine's tensors
        gm, kind, target = record["graph"], record["kind"], record["target"]
    except Exception as e:  # another torch's pickle, a damaged file: this miss stays, with why
        return MissOutcome(key, "a graph", 0.0, f"{RECORD} does not load here: {brief_exception(e, 200)}")
    description = f"{kind} graph ({len(gm.graph.nodes)} nodes, {target}, captured by torch {record['torch']})"
    options = BackendOptions(**record["options"])
    if options.key_settings(target) != record["settings"]:
        return MissOutcome(key, description, 0.0, f"its settings ({record['settings']}) differ here "
                                                  f"({options.key_settings(target)}): a tuning cache of other contents?")
    on_this_machine(gm)
    inputs = [torch.empty_strided(shape, stride, dtype=dtype).zero_() for shape, stride, dtype in record["inputs"]]
    try:
        lowered = GraphCompiler(options, kind)._lower(gm, inputs, f"{kind}_{key[:8]}", target,
                                                      state_inputs=tuple(record.get("state_inputs", ())))
    except Exception as e:
        return MissOutcome(key, description, time.perf_counter() - start, brief_exception(e, 300))

    def fill(entry: Path) -> None:
        lowered.save(entry, with_state=True, stages=False)
        shutil.copyfile(directory / CODE, entry / CODE)
    compile_cache.store_entry("graphs", key, fill)
    return MissOutcome(key, description, time.perf_counter() - start)


def on_this_machine(gm: torch.fx.GraphModule) -> None:
    """Make the tensors a graph creates (its `device=` arguments) CPU
    tensors: the compile traces the graph here, and the key leaves devices out."""
    cpu = torch.device("cpu")

    def moved(value):
        return cpu if isinstance(value, torch.device) else value
    for node in gm.graph.nodes:
        node.args = torch.fx.node.map_aggregate(node.args, moved)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, moved)
    gm.recompile()
