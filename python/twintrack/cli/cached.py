"""tools/compile.py and the compile cache (twintrack.compiler.compile_cache): a
repeated command is answered before torch is imported, and a compile whose
exported graph was compiled before copies that artifact instead.

A command's key is its options, the model's spec and the compiler's
fingerprint; its entry lists every source file that loading the model read
(the model file, the factory's own imports) with their hashes, so an edit to
any of them is a miss. Files under torch, twintrack and the standard library
are left out: the fingerprint covers them. Data files a factory reads are
not tracked: TWINTRACK_CACHE=0 compiles afresh."""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import sysconfig
from contextlib import contextmanager
from pathlib import Path

from ..compiler import compile_cache
from ..frontend.model_spec import absolute_model_spec, model_file
from ..phases import phase

# Flags that print what an artifact does not keep (fusion remarks, every stage's IR) or tune on a GPU.
UNCACHED_FLAGS = ("autotune", "explain_fusion", "explain_schedule", "print_ir_after_all", "stop_after")
# Flags that change no byte of the artifact.
PRESENTATION_FLAGS = ("output", "quiet", "time_stages", "debug")
# The environment a compile reads.
ENVIRONMENT = ("TWINTRACK_STRICT_KERNELS", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")


def cacheable(args: argparse.Namespace) -> bool:
    return compile_cache.enabled() and not any(getattr(args, flag, None) for flag in UNCACHED_FLAGS)


def request_key(args: argparse.Namespace) -> str:
    with phase("compile cache: key"):
        settings = {k: v for k, v in vars(args).items() if k not in PRESENTATION_FLAGS}
        settings["model"] = absolute_model_spec(args.model)
        lowering = compile_cache.directory_digest(args.lowering_dir) if args.lowering_dir else ""
        environment = [os.environ.get(name, "") for name in ENVIRONMENT]
        return compile_cache.digest(json.dumps(settings, sort_keys=True, default=str), lowering, *environment,
                                    compile_cache.compiler_fingerprint())


def find_request(key: str) -> Path | None:
    with phase("compile cache: lookup"):
        return compile_cache.find_request(key)


def artifact_key(exported, options) -> str:
    with phase("compile cache: key"):
        return compile_cache.digest(exported.fingerprint(), options.stable_hash(),
                                    compile_cache.directory_digest(options.lowering_dir),
                                    compile_cache.compiler_fingerprint())


@contextmanager
def files_read(spec: str, tracked: bool = True):
    """The source files loading the model reads (a list, filled on exit;
    left empty where the compile is not cached: `tracked` false)."""
    before = set(sys.modules)
    files: list[Path] = []
    try:
        yield files
    finally:
        if tracked:
            files += _model_sources(spec, set(sys.modules) - before)


def _model_sources(spec: str, imported: set[str]) -> list[Path]:
    """The model file and the modules its loading imported, less those the fingerprint covers."""
    path = model_file(spec)
    found = [path.absolute()] if path is not None and path.is_file() else []
    for name in imported:
        module_path = getattr(sys.modules[name], "__file__", None)
        if module_path and not _versioned(module_path):
            found.append(Path(module_path).resolve())
    return found


@functools.cache
def _versioned_roots() -> tuple[str, ...]:
    import torch
    return tuple(str(root) + os.sep for root in (Path(torch.__file__).resolve().parent, compile_cache.PACKAGE_DIR,
                                                   Path(sysconfig.get_paths()["stdlib"]).resolve()))


def _versioned(module_path: str) -> bool:
    """A file the compiler fingerprint already covers: torch's, twintrack's,
    the standard library's (its path resolved only where it is not plainly
    under one of theirs: resolving every module torch imports took 0.2 s)."""
    roots = _versioned_roots()
    return module_path.startswith(roots) or os.path.realpath(module_path).startswith(roots)


def reuse(cached: Path | None, outdir: Path, model: str, dtype: str | None, seconds) -> dict | None:
    """The cached artifact, copied into OUTDIR atomically, its manifest
    naming this command's model; returns the manifest, or None (a miss)
    where there is none or it went while being read (another process
    evicted it)."""
    from ..runtime.artifact import MANIFEST, atomic_directory
    if cached is None:
        return None
    try:
        with phase("compile cache: copy artifact"), atomic_directory(outdir) as staging:
            compile_cache.copy_artifact(cached, staging)
            manifest = json.loads((staging / MANIFEST).read_text())
            manifest.update(model=model, dtype=dtype, compile_cache="hit", compile_seconds=round(seconds(), 3))
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    except (OSError, shutil.Error, ValueError):
        return None
    return manifest


def remember(request: str, artifact: str, outdir: Path, files: list[Path]) -> None:
    """Keep OUTDIR's artifact under its graph's key and the command's."""
    with phase("compile cache: store"):
        compile_cache.store_artifact(artifact, outdir)
        compile_cache.store_request(request, artifact, files)
