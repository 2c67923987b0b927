"""Autotuning of the GPU matmul kernels: which tile each matmul takes.

A choice is keyed by what decides a kernel's speed (`TuningKey`: the op and
its operand layout, the shapes, the dtypes, the GPU arch and the compiler
version, a hash of the matmul kernel generators) and kept in a JSON cache
(`TuningCache`), so a second compile reuses it. Without an entry, the
heuristic table (lowering/tuning/matmul.toml) chooses.

Tuning compiles the model once per candidate rank ("variant" k: every
matmul takes its k-th fitting tile, or its last), times every kernel of
every variant on the GPU (tools/tune.py, which needs no MLIR, so it runs on
a GPU machine that cannot compile) and records the fastest tile per key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .. import __version__

CACHE_ENV = "TWINTRACK_TUNING_CACHE"


def default_cache_path() -> Path:
    """$TWINTRACK_TUNING_CACHE, else the user's cache directory."""
    if CACHE_ENV in os.environ:
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "twintrack" / "tuning.json"


@functools.cache
def compiler_version() -> str:
    """twintrack's version and a hash of the matmul kernel generators: a
    tile measured on other generated code is not reused."""
    from .kernels.registry import generator_sources  # the registry names them (it needs mlir: compile side only)
    digest = hashlib.sha256()
    for path in generator_sources():
        digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:10]}"


@dataclass(frozen=True)
class TuningKey:
    op: str                     # e.g. "matmul", "batch_matmul.bT" (B read transposed)
    shape: tuple[int, ...]      # (batch, m, n, k), batch 1 for a plain matmul
    dtypes: str                 # operands -> result, e.g. "f16->f32"
    arch: str
    compiler: str

    def text(self) -> str:
        return "|".join([self.op, "x".join(map(str, self.shape)), self.dtypes, self.arch, self.compiler])


def tile_record(generator: str, tile) -> dict:
    """A tile as JSON: the kernel generator's name and the tile's fields."""
    return {"generator": generator, **dataclasses.asdict(tile)}


class TuningCache:
    """Measured choices, {key text: {"tile": record, "ms": time, "candidates": [...]}}."""

    def __init__(self, path: Path, entries: dict | None = None):
        self.path, self.entries = path, entries or {}

    @classmethod
    def load(cls, path: Path) -> TuningCache:
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a twintrack tuning cache ({e})") from e
        return cls(path, data.get("entries", {}))

    def lookup(self, key: TuningKey) -> dict | None:
        entry = self.entries.get(key.text())
        return entry["tile"] if entry else None

    def record(self, key_text: str, tile: dict, ms: float, candidates: list[dict], device: str) -> None:
        self.entries[key_text] = {"tile": tile, "ms": ms, "candidates": candidates, "device": device}

    def merge(self, other: TuningCache) -> None:
        self.entries.update(other.entries)

    def save(self) -> None:
        """Written whole to a temporary file first: never half a cache."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps({"format": "twintrack-tuning-1", "entries": self.entries}, indent=1) + "\n")
        scratch.replace(self.path)


@dataclass(frozen=True)
class TuningRequest:
    """How one compile chooses tiles (the matmul pass's options
    tuning_cache and tuning_variant, from CompileOptions): from `cache`
    where it has an entry, else the heuristic; or, for a tuning variant,
    the `variant`-th fitting tile of every matmul. Without either, the
    heuristic alone."""
    cache: TuningCache | None = None
    variant: int | None = None

    def choose(self, key: TuningKey, candidates: list[tuple[str, object]], heuristic: int) -> tuple[int, bool]:
        """(index of the (generator name, tile) candidate to take, whether the
        cache was asked and had no entry for `key`)."""
        if self.variant is not None:
            return min(self.variant, len(candidates) - 1), False
        if self.cache is None:
            return heuristic, False
        wanted = self.cache.lookup(key)
        for index, (generator, tile) in enumerate(candidates):
            if wanted == tile_record(generator, tile):
                return index, False
        return heuristic, True


def request_for(cache_path: str, variant: str) -> TuningRequest:
    """The request a matmul pass's option strings name ("" for none)."""
    return TuningRequest(TuningCache.load(Path(cache_path)) if cache_path else None, int(variant) if variant else None)


def cache_digest(path: Path | None) -> str:
    """What of a tuning cache goes into the options hash: its content."""
    if path is None or not Path(path).exists():
        return ""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
