"""The twintrack side of a comparison: a callable on (inputs...) and its kernels.

- CPU: compiled here; its kernels are the dispatches of the fusion stage
  (dispatch_report), each with its MLIR.
- GPU: a precompiled artifact (the GPU machine cannot compile the MLIR track)
  or, where the toolchain is installed, one compiled now; its kernels are the
  kernel report's, each with its PTX and gpu.module MLIR.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checked_run import ArtifactTrack, Track, flat_outputs
from ...frontend.export import ModelSource
from ...locations import brief_source


@dataclass
class TwintrackTrack:
    run: Track                              # inputs -> flat outputs
    kernels: list[dict]
    compile_seconds: float | None
    program: object | None                 # the torch.export program, for the op graph
    graph_run: Track | None = None          # GPU: the plan replayed as one CUDA graph


def twintrack_track(source: ModelSource, device: str, scratch: Path, artifact: Path | None = None,
                    freeze: bool = False, with_program: bool = True) -> TwintrackTrack:
    """The track for `device`: on the GPU `artifact` (else one compiled into
    `scratch`), on the CPU compiled here (`freeze`: weights baked in)."""
    if device == "cuda":
        return gpu_track(source, artifact, scratch, with_program)
    return cpu_track(source, freeze)


def cpu_track(source: ModelSource, freeze: bool = False) -> TwintrackTrack:
    from ... import api
    from ...compiler.dispatch_report import dispatch_report
    start = time.perf_counter()
    exported = api.export(source.module, source.example_inputs, freeze=freeze)
    lowered = exported.lower(to="fusion", target="cpu")
    kernels = dispatch_report(lowered.compilation.module)
    compiled = lowered.compile("cpu")
    seconds = time.perf_counter() - start
    return TwintrackTrack(lambda *xs: flat_outputs(compiled(*xs)), kernels, seconds, exported.exported.program)


def gpu_track(source: ModelSource, artifact: Path | None, scratch: Path, with_program: bool = True) -> TwintrackTrack:
    """Run `artifact`; without one, compile `source` into `scratch` first.
    `with_program`: also export the model here, for the op graph."""
    from ...runtime.artifact import read_manifest
    if artifact is None:
        artifact = _compile_gpu_artifact(source, scratch / "twintrack-gpu")
    manifest = read_manifest(artifact)
    _check_artifact_matches(manifest, source, artifact)
    track = ArtifactTrack.load(artifact, source, manifest)
    kernels = [_gpu_kernel(index, entry, artifact) for index, entry in enumerate(manifest["kernels"])]
    return TwintrackTrack(track, kernels, manifest.get("compile_seconds"),
                          _exported_program(source, manifest["frozen"]) if with_program else None,
                          track.graphed())


def _check_artifact_matches(manifest: dict, source: ModelSource, artifact: Path) -> None:
    from ...errors import ArtifactError
    from ...frontend.model_spec import absolute_model_spec
    if manifest.get("pipeline") != "gpu":
        raise ArtifactError(f"{artifact}: a '{manifest.get('pipeline')}' artifact; compile MODEL with --pipeline gpu")
    if absolute_model_spec(manifest.get("model") or "") != absolute_model_spec(source.spec):
        raise ArtifactError(f"{artifact}: compiled from {manifest.get('model')}, not {source.spec}")
    dtype = str(next(iter(source.module.parameters()), torch.empty(0)).dtype).removeprefix("torch.")
    if (manifest.get("dtype") or "float32") != dtype:
        raise ArtifactError(f"{artifact}: compiled for {manifest.get('dtype') or 'float32'}, the model is {dtype}")


def _compile_gpu_artifact(source: ModelSource, outdir: Path) -> Path:
    from ... import api
    from ...runtime.artifact import read_manifest, record_compile_time
    start = time.perf_counter()
    api.export(source.module, source.example_inputs).lower(to=None, target="gpu").save(outdir)
    record_compile_time(outdir, read_manifest(outdir), time.perf_counter() - start)
    return outdir


def _gpu_kernel(index: int, entry: dict, artifact: Path) -> dict:
    ptx = artifact / entry["ptx"]
    sources = {"ptx": ptx.read_text()} if ptx.is_file() else {}
    mlir = _gpu_module_text(artifact, entry["name"])
    if mlir:
        sources["mlir"] = mlir
    return {"index": index, "name": entry["name"], "kind": entry.get("path", "generic"),
            "source_ops": [brief_source(s) for s in entry["source_ops"]], "source_keys": entry.get("source_keys", []),
            "bytes": entry["bytes"], "flops": entry["flops"], "registers": entry["registers"],
            "spills": entry["spills"], "shared_bytes": entry["shared_bytes"],
            "grid": entry["grid"], "block": entry["block"], "sources": sources}


def _gpu_module_text(artifact: Path, name: str) -> str | None:
    """The kernel's gpu.module as the outline stage left it."""
    dumps = sorted((artifact / "stages").glob("*-outline.mlir"))
    if not dumps:
        return None
    text = dumps[-1].read_text()
    match = re.search(rf"^( *)gpu\.module @{re.escape(name)}\b.*?^\1}}", text, re.DOTALL | re.MULTILINE)
    return match.group(0) if match else None


def _exported_program(source: ModelSource, frozen: bool):
    """The program torch.export makes of the model here (for the op graph); None if it cannot."""
    from ...errors import TwintrackError
    from ...frontend.export import export_model
    try:
        return export_model(source, freeze=frozen).program
    except TwintrackError:
        return None


def scratch_directory() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="twintrack-compare-")
