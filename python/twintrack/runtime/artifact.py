"""Artifacts: OUTDIR with manifest.json and stages/, written atomically; the
format, read and checked here (artifact_writer.py writes a compilation).

Everything is written into a temporary sibling directory and renamed into
place at the end, so OUTDIR is never half-written. A failed compile leaves
only OUTDIR/repro/ (input IR, command.sh, error.txt)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ArtifactError, CompilerError

if TYPE_CHECKING:  # torch is imported only where a load needs it: a cached repeat needs none
    from ..calling import TensorSpec

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2  # 2: the calling convention ('calling') and baked-in scalar inputs ('scalars')
EXECUTABLE = "executable.mlir"  # the CPU track's complete LLVM-dialect module


@contextmanager
def atomic_directory(outdir: Path):
    """Yield a temporary directory that replaces `outdir` on success."""
    outdir = Path(outdir)
    parent = outdir.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=parent))
    except OSError as e:
        raise ArtifactError(f"cannot write output directory {outdir}: {e.strerror}") from None
    try:
        yield staging
        _replace(staging, outdir)
    except CompilerError as e:
        if e.reproducer is not None:
            e.reproducer.write(staging / "repro")
            _replace(staging, outdir)
            raise e.with_repro_dir(outdir / "repro") from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace(staging: Path, outdir: Path) -> None:
    if outdir.is_dir() and not (outdir / MANIFEST).exists() and not (outdir / "repro").exists() and any(outdir.iterdir()):
        raise ArtifactError(f"{outdir} exists and is not a twintrack artifact; refusing to replace it")
    try:
        if outdir.exists():
            shutil.rmtree(outdir)
        os.rename(staging, outdir)
    except OSError as e:
        raise ArtifactError(f"cannot write output directory {outdir}: {e.strerror}") from None


STATE = "state.pt"  # the parameters and buffers, where the artifact carries them (Compiled.save)


def write_state(directory: Path, manifest: dict, state: list) -> None:
    import torch
    if not state:
        return
    torch.save([t.detach().cpu() for t in state], directory / STATE)
    manifest["state"] = STATE
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def read_state(outdir: Path, manifest: dict) -> list:
    """The artifact's own state tensors (none unless it carries them)."""
    import torch
    if "state" not in manifest:
        return []
    try:
        state = torch.load(outdir / manifest["state"], weights_only=True)
    except Exception as e:  # torch raises several types for a damaged file
        raise ArtifactError(f"{outdir / str(manifest['state'])}: unreadable state ({type(e).__name__})") from None
    arguments = [a for a in manifest["arguments"] if a["kind"] != "input"]
    if not isinstance(state, list) or [list(t.shape) for t in state] != [a["shape"] for a in arguments]:
        raise ArtifactError(f"{outdir / STATE}: does not match the manifest's parameters and buffers")
    return state


def record_compile_time(directory: Path, manifest: dict, seconds: float) -> None:
    """Add the end-to-end compile time (load, export, stages, packaging)."""
    manifest["compile_seconds"] = round(seconds, 3)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def fast_flop_share(kernels: Iterable[tuple[str, float]]) -> float | None:
    """The share of the counted flops that kernels on a fast path (a kernel
    generator's, any path but "generic") compute, from (path, flops) pairs;
    None where no kernel counts flops (a kernel of run-time sizes counts none)."""
    fast = total = 0.0
    for path, flops in kernels:
        flops = flops or 0
        total += flops
        fast += flops if path != "generic" else 0
    return fast / total if total else None


def read_manifest(outdir: Path) -> dict:
    """The manifest, validated: a damaged or edited one is refused here,
    with the field it got wrong, before anything runs."""
    path = Path(outdir) / MANIFEST
    if not path.is_file():
        raise ArtifactError(f"{outdir}: no {MANIFEST} (not a twintrack artifact directory)")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: corrupt manifest ({e})") from None
    validate_manifest(manifest, Path(outdir))
    return manifest


SPEC_KINDS = {"arguments": ("parameter", "buffer", "input"), "inputs": ("input",), "outputs": ("output",)}
DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
          "int64", "int32", "int16", "int8", "uint8", "bool")


def validate_manifest(manifest: dict, outdir: Path) -> None:
    where = outdir / MANIFEST
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{where}: not a JSON object")
    version = manifest.get("manifest_version")
    if version != MANIFEST_VERSION:
        raise ArtifactError(f"{where}: manifest version {version!r}, this twintrack reads {MANIFEST_VERSION}; "
                            f"recompile the model")
    for key in ("model", "pipeline", "frozen", "arguments", "inputs", "outputs", "calling", "executable"):
        if key not in manifest:
            raise ArtifactError(f"{where}: missing '{key}'")
    for key in SPEC_KINDS:
        for i, entry in enumerate(manifest[key] if isinstance(manifest[key], list) else [None]):
            problem = _spec_problem(entry, SPEC_KINDS[key])
            if problem:
                raise ArtifactError(f"{where}: {key}[{i}]: {problem}")
    executable = manifest["executable"]
    if executable is not None and not (outdir / str(executable)).is_file():
        raise ArtifactError(f"{where}: its executable {executable} is missing")
    from ..calling import CallingConvention
    CallingConvention.from_json(manifest["calling"], str(where)).check_against(
        len(manifest["outputs"]), len(manifest["arguments"]), str(where))


def _spec_problem(entry, kinds: tuple[str, ...]) -> str | None:
    if not isinstance(entry, dict) or not {"name", "shape", "dtype", "kind"} <= set(entry):
        return "not a tensor description (name, shape, dtype, kind)"
    if not isinstance(entry["shape"], list) or not all((isinstance(d, int) and d >= 0) or isinstance(d, str)
                                                       for d in entry["shape"]):
        return f"bad shape {entry['shape']!r}"
    if entry["dtype"] not in DTYPES:
        return f"unsupported dtype {entry['dtype']!r}"
    if entry["kind"] not in kinds:
        return f"kind {entry['kind']!r}, expected one of {', '.join(kinds)}"
    order = entry.get("storage_order")
    if order is not None and not _dims_in_some_order(order, len(entry["shape"])):
        return f"storage order {order!r} is no order of its {len(entry['shape'])} dims"
    return None


def _dims_in_some_order(order, rank: int) -> bool:
    return isinstance(order, list) and all(isinstance(d, int) for d in order) and sorted(order) == list(range(rank))


def specs(manifest: dict, key: str) -> list[TensorSpec]:
    from ..calling import TensorSpec
    return [TensorSpec.from_json(d) for d in manifest[key]]


def dynamic_dims(manifest: dict) -> list:
    """The input dims the compile left open, their names checked against
    the shape expressions that use them."""
    from ..dynamic_shapes import DynamicDim, compile_expression
    entries = manifest.get("dynamic", [])
    if not isinstance(entries, list):
        raise ArtifactError(f"{manifest.get('model', 'artifact')}: damaged 'dynamic' section")
    dims = [DynamicDim.from_json(entry) for entry in entries]
    names = {dim.name for dim in dims}
    for key in SPEC_KINDS:
        for entry in manifest[key]:
            for size in entry["shape"]:
                if isinstance(size, str):
                    compile_expression(size, names)
    return dims


def calling_convention(manifest: dict):
    """The manifest's calling convention (CallingConvention.of_manifest)."""
    from ..calling import CallingConvention
    return CallingConvention.of_manifest(manifest)
