"""A compilation written as an artifact (the format: artifact.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..runtime.artifact import EXECUTABLE, MANIFEST, MANIFEST_VERSION

if TYPE_CHECKING:  # torch is imported only where a compile needs it
    from .driver import Compilation


def _functions(llvm_text: str) -> list[dict]:
    names = re.findall(r"^\s*llvm\.func @([\w$.]+)\(.*\{\s*$", llvm_text, flags=re.M)
    return [{"name": n, "kind": "c-interface" if n.startswith("_mlir_ciface_") else "function"} for n in names]


def _loop_nests(affine_text: str) -> int:
    return len(re.findall(r"^ {4}affine\.for ", affine_text, flags=re.M))


def _vectorize_outcome(vectorize_text: str) -> str | None:
    found = re.search(r'twintrack\.vectorize = "([^"]*)"', vectorize_text)
    return found.group(1) if found else None


def generic_sites(remarks: list[str]) -> list[dict]:
    """The ops no fast path took, each with the pass that refused it and why
    (the remarks 'SITE: STAGE: generic path: REASON')."""
    sites = []
    for remark in remarks:
        site, _, rest = remark.partition(": ")
        stage, marker, reason = rest.partition(": generic path: ")
        if marker:
            sites.append({"site": site, "stage": stage, "reason": reason})
    return sites


def manifest_for(compilation: Compilation, model_spec: str, dtype: str | None = None, stages: bool = True) -> dict:
    exported, dumps = compilation.exported, compilation.dumps
    by_name = {d.name: d for d in dumps}
    complete = dumps[-1].name == compilation.recipe.stages[-1].name
    return {
        "manifest_version": MANIFEST_VERSION,
        "twintrack_version": __version__,
        "model": model_spec,
        "dtype": dtype,
        "pipeline": compilation.recipe.target,
        "frozen": exported.frozen,
        "allow_tf32": compilation.options.allow_tf32,
        "options_hash": compilation.options.stable_hash(),
        "kernel_fallbacks": [{"stage": f.stage, "kernel": f.kernel, "reason": f.message,
                              "reproducer": f"repro/{f.kernel}"} for f in compilation.fallbacks],
        "generic_sites": generic_sites(compilation.remarks),
        "stages": [{"index": d.index, "name": d.name, **({"file": f"stages/{d.file_name}"} if stages else {}),
                    "seconds": round(d.seconds, 4)} for d in dumps],
        "arguments": [s.to_json() for s in exported.arguments],
        "inputs": [s.to_json() for s in exported.inputs],
        "outputs": [s.to_json() for s in exported.outputs],
        "calling": exported.calling.to_json(),
        "scalars": [[position, value] for position, value in exported.scalars.items()],
        "dynamic": [dim.to_json() for dim in exported.dynamic],
        "entry": "forward",
        "executable": EXECUTABLE if complete else None,
        "functions": _functions(dumps[-1].text) if complete else [],
        "kernels": [{"name": "forward", "affine_loop_nests": _loop_nests(by_name["affine"].text),
                     "vectorize": _vectorize_outcome(by_name["vectorize"].text) if "vectorize" in by_name else None}]
        if "affine" in by_name else [],
    }


def write_artifact(directory: Path, compilation: Compilation, model_spec: str, dtype: str | None = None,
                   stages: bool = True) -> dict:
    """The artifact's files and its manifest; `stages`: with the IR after every stage (stages/)."""
    complete = compilation.dumps[-1].name == compilation.recipe.stages[-1].name
    assembly = None
    if complete and compilation.recipe.target == "gpu":  # ptxas runs while the dumps are written
        from .gpu_codegen import start_kernels
        assembly = start_kernels(compilation, directory)
    try:
        _write_dumps(directory, compilation, stages)
        manifest = manifest_for(compilation, model_spec, dtype, stages)
        if assembly is not None:
            from .gpu_codegen import package
            manifest.update(package(compilation, directory, assembly))
        elif complete:
            from .cpu_jit import executable_text
            text = executable_text(compilation.module, compilation.exported.arguments, compilation.exported.outputs)
            (directory / EXECUTABLE).write_text(text)
    finally:
        if assembly is not None:
            assembly.cancel()
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _write_dumps(directory: Path, compilation: Compilation, stages: bool = True) -> None:
    """The stages' IR (with `stages`) and each failed kernel's reproducer."""
    if stages:
        (directory / "stages").mkdir(parents=True, exist_ok=True)
        for dump in compilation.dumps:
            (directory / "stages" / dump.file_name).write_text(dump.text)
    for fallback in compilation.fallbacks:
        fallback.reproducer.write(directory / "repro" / fallback.kernel)
