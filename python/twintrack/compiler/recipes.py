"""Lowering recipes: the per-target stage tables kept as data in lowering/."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from string import Template

from ..errors import UsageError
from .target import DEFAULT_ARCH, DEFAULT_LOWERING_DIR

__all__ = ["DEFAULT_ARCH", "DEFAULT_LOWERING_DIR"]  # the target's, re-exported for the CLI and options
FRONTEND_STAGES = ("fx",)


@dataclass(frozen=True)
class StageRecipe:
    name: str
    description: str
    pipeline: str | None = None      # textual pass pipeline, run by `tool`
    python_passes: tuple[str, ...] = ()  # or: names of twintrack Python passes (twintrack.compiler.passes)
    tool: str = "mlir-opt"           # which MLIR the stage runs in
    fast_path: bool = False          # optional: skipped (IR unchanged) under --no-fast-kernels
    targets: tuple[str, ...] = ()    # only in these targets' pipelines (a shared recipe's stage); empty: all

    @property
    def binding(self) -> str:
        """'torch_mlir' or 'mlir': which Python bindings run this stage."""
        return "torch_mlir" if self.tool == "torch-mlir-opt" else "mlir"


@dataclass(frozen=True)
class Recipe:
    target: str
    description: str
    stages: tuple[StageRecipe, ...]

    def stage_names(self) -> list[str]:
        return list(FRONTEND_STAGES) + [s.name for s in self.stages]


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"{path}: unreadable recipe: {e}") from None


def _stages(path: Path, data: dict | None = None) -> tuple[StageRecipe, ...]:
    data = _read(path) if data is None else data
    try:
        return tuple(StageRecipe(**{**entry, "python_passes": tuple(entry.get("python_passes", ())),
                                    "targets": tuple(entry.get("targets", ()))})
                     for entry in data.get("stage", ()))
    except TypeError as e:
        raise UsageError(f"{path}: malformed stage: {e}") from None


def available_pipelines(lowering_dir: Path = DEFAULT_LOWERING_DIR) -> list[str]:
    return sorted(p.stem for p in lowering_dir.glob("*.toml"))


class PipelineVariables(Mapping):
    """Variables recipe pipelines may use, resolved only when used:
    $arch, $target, $tf32, $strict and $emulate_precision_casts (true or false), $threads (the CPU kernels'
    threads) and $parallel (with more than one, the passes that make parallel loops async tasks), $lowering (the recipes' directory), $tuning (the
    matmul pass's tuning_cache/tuning_variant options, or nothing), $libdevice, and $fusion (the options of twintrack-form-dispatches:
    the target's roofline from lowering/targets/<target>.toml, and whether to
    fuse and to explain)."""

    def __init__(self, arch: str = DEFAULT_ARCH, target: str = "cpu", fuse: bool = True, explain: bool = False,
                 lowering_dir: Path = DEFAULT_LOWERING_DIR, tf32: bool = False, strict: bool = False,
                 tuning_cache: Path | None = None, tuning_variant: int | None = None,
                 emulate_precision_casts: bool = False, threads: int = 1):
        self._values = {"arch": lambda: arch, "target": lambda: target,
                        "tf32": lambda: str(tf32).lower(), "strict": lambda: str(strict).lower(),
                        "emulate_precision_casts": lambda: str(emulate_precision_casts).lower(),
                        "threads": lambda: str(threads),
                        "parallel": lambda: _async_passes(threads),
                        "lowering": lambda: str(Path(lowering_dir).resolve()),
                        "tuning": lambda: _tuning_options(tuning_cache, tuning_variant),
                        "libdevice": _libdevice,
                        "fusion": lambda: _fusion_options(Path(lowering_dir), target, fuse, explain)}

    def __getitem__(self, key: str) -> str:
        if key not in self._values:
            raise UsageError(f"unknown recipe variable ${key} (known: {', '.join(self._values)})")
        return self._values[key]()

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _tuning_options(cache: Path | None, variant: int | None) -> str:
    options = ([f"tuning_cache={Path(cache).resolve()}"] if cache else []) + \
        ([f"tuning_variant={variant}"] if variant is not None else [])
    return " ".join(options)


def _fusion_options(lowering_dir: Path, target: str, fuse: bool, explain: bool) -> str:
    roofline = target_roofline(target, lowering_dir)
    options = [f"{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in roofline.items()
               if not isinstance(value, dict)]  # tables are for other readers (tools/compare.py)
    options += [] if fuse else ["fuse=false"]
    options += ["explain=true"] if explain else []
    return " ".join(options)


def _async_passes(threads: int) -> str:
    """The passes that run scf.parallel loops as tasks on MLIR's async
    runtime, ending in a comma; none for one thread, where a parallel loop
    (a GPU loop nest run on the CPU, say) stays a loop."""
    if threads <= 1:
        return ""
    return (f"async-parallel-for{{num-workers={threads} min-task-size=1}}, async-to-async-runtime, "
            "async-runtime-ref-counting, async-runtime-ref-counting-opt, convert-async-to-llvm,")


def target_roofline(target: str, lowering_dir: Path = DEFAULT_LOWERING_DIR) -> dict:
    """lowering/targets/<target>.toml: the target's bandwidth, flop rates and fusion limits."""
    path = Path(lowering_dir) / "targets" / f"{target}.toml"
    return _read(path) if path.is_file() else {}


def _libdevice() -> str:
    from ..tooling import find_libdevice
    path = find_libdevice()
    if path is None:
        raise UsageError("libdevice.10.bc not found: install the CUDA toolkit (or the nvidia-cuda-nvcc wheel) "
                         "or set CUDA_HOME")
    return path


def load_recipe(target: str, lowering_dir: Path = DEFAULT_LOWERING_DIR,
                variables: Mapping | None = None) -> Recipe:
    path = Path(lowering_dir) / f"{target}.toml"
    if not path.is_file():
        known = ", ".join(available_pipelines(Path(lowering_dir))) or "none"
        raise UsageError(f"unknown pipeline '{target}' (available: {known})")
    data = _read(path)
    stages = tuple(stage for include in data.get("include", ()) for stage in _stages(Path(lowering_dir) / f"{include}.toml"))
    stages += _stages(path, data)
    target = data.get("target", target)
    stages = tuple(stage for stage in stages if not stage.targets or target in stage.targets)
    if variables is not None:
        stages = tuple(replace(s, pipeline=Template(s.pipeline).substitute(variables) if s.pipeline else None,
                               python_passes=tuple(Template(p).substitute(variables) for p in s.python_passes))
                       for s in stages)
    for stage in stages:
        if (stage.pipeline is None) == (not stage.python_passes):
            raise UsageError(f"{path}: stage '{stage.name}' needs exactly one of pipeline / python_passes")
    return Recipe(target=target, description=data.get("description", ""), stages=stages)
