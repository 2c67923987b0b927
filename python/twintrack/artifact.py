"""Artifacts: OUTDIR with manifest.json and stages/, written atomically.

Everything is written into a temporary sibling directory and renamed into
place at the end, so OUTDIR is never half-written. A failed compile leaves
only OUTDIR/repro/ (input IR, command.sh, error.txt)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from . import __version__
from .driver import Compilation, full_text
from .errors import ArtifactError, CompilerError
from .frontend import TensorSpec

MANIFEST = "manifest.json"
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


def _functions(llvm_text: str) -> list[dict]:
    names = re.findall(r"^\s*llvm\.func @([\w$.]+)\(.*\{\s*$", llvm_text, flags=re.M)
    return [{"name": n, "kind": "c-interface" if n.startswith("_mlir_ciface_") else "function"} for n in names]


def _loop_nests(affine_text: str) -> int:
    return len(re.findall(r"^ {4}affine\.for ", affine_text, flags=re.M))


def _vectorize_outcome(vectorize_text: str) -> str | None:
    found = re.search(r'twintrack\.vectorize = "([^"]*)"', vectorize_text)
    return found.group(1) if found else None


def manifest_for(compilation: Compilation, model_spec: str, dtype: str | None = None) -> dict:
    exported, dumps = compilation.exported, compilation.dumps
    by_name = {d.name: d for d in dumps}
    complete = dumps[-1].name == compilation.recipe.stages[-1].name
    return {
        "twintrack_version": __version__,
        "model": model_spec,
        "dtype": dtype,
        "pipeline": compilation.recipe.target,
        "frozen": exported.frozen,
        "allow_tf32": compilation.options.allow_tf32,
        "options_hash": compilation.options.stable_hash(),
        "kernel_fallbacks": [{"stage": f.stage, "kernel": f.kernel, "reason": f.message,
                              "reproducer": f"repro/{f.kernel}"} for f in compilation.fallbacks],
        "stages": [{"index": d.index, "name": d.name, "file": f"stages/{d.file_name}",
                    "seconds": round(d.seconds, 4)} for d in dumps],
        "arguments": [s.to_json() for s in exported.arguments],
        "inputs": [s.to_json() for s in exported.inputs],
        "outputs": [s.to_json() for s in exported.outputs],
        "entry": "forward",
        "executable": EXECUTABLE if complete else None,
        "functions": _functions(dumps[-1].text) if complete else [],
        "kernels": [{"name": "forward", "affine_loop_nests": _loop_nests(by_name["affine"].text),
                     "vectorize": _vectorize_outcome(by_name["vectorize"].text) if "vectorize" in by_name else None}]
        if "affine" in by_name else [],
    }


def write_artifact(directory: Path, compilation: Compilation, model_spec: str, dtype: str | None = None) -> dict:
    stages = directory / "stages"
    stages.mkdir(parents=True, exist_ok=True)
    for dump in compilation.dumps:
        (stages / dump.file_name).write_text(dump.text)
    for fallback in compilation.fallbacks:
        fallback.reproducer.write(directory / "repro" / fallback.kernel)
    manifest = manifest_for(compilation, model_spec, dtype)
    if manifest["executable"] is not None:
        if compilation.recipe.target == "gpu":
            from .gpu_codegen import package
            manifest.update(package(compilation, directory, compilation.options.arch))
        else:
            (directory / EXECUTABLE).write_text(full_text(compilation.module))
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def record_compile_time(directory: Path, manifest: dict, seconds: float) -> None:
    """Add the end-to-end compile time (load, export, stages, packaging)."""
    manifest["compile_seconds"] = round(seconds, 3)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def read_manifest(outdir: Path) -> dict:
    path = Path(outdir) / MANIFEST
    if not path.is_file():
        raise ArtifactError(f"{outdir}: no {MANIFEST} (not a twintrack artifact directory)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path}: corrupt manifest ({e})") from None


def specs(manifest: dict, key: str) -> list[TensorSpec]:
    return [TensorSpec(d["name"], tuple(d["shape"]), d["dtype"], d["kind"]) for d in manifest[key]]
