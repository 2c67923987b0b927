"""GPU packaging after the last stage: PTX out of the gpu.binary ops, cubins
from ptxas (with its resource report), the host plan, and the kernel report.

Everything here runs at compile time (it needs the `mlir` bindings); the GPU
machine only needs twintrack.runtime."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from mlir import ir

from . import compile_cache
from ..errors import CompilerError, UsageError
from .host_plan import extract_plan
from ..phases import phase
from .reproducer import Reproducer
from ..tooling import find_tool
from .options import FULL_FOR_SETMAXNREG

PTXAS_HINT = ("ptxas not found: install the CUDA toolkit (ptxas is in its bin/) or "
              "`pip install nvidia-cuda-nvcc`, or put ptxas on PATH")


@dataclass(frozen=True)
class Resources:
    registers: int
    spills: int          # bytes of spill stores + loads
    shared_bytes: int
    performance_notes: tuple[str, ...] = ()  # ptxas's "Potential Performance Loss" lines (serialized wgmma: C7513)
    reassembled: str = ""  # why the kernel was assembled at full optimization instead of the level asked for


def extract_ptx(module) -> dict[str, str]:
    """{gpu.module name: PTX text} from the gpu.binary ops of the final module."""
    from mlir.dialects import gpu
    ptx = {}
    for op in module.body.operations:
        if op.operation.name == "gpu.binary":
            name = op.operation.attributes["sym_name"].value
            objects = op.operation.attributes["objects"]
            ptx[name] = gpu.ObjectAttr(objects[0]).object.decode()
    return ptx


SETMAXNREG = "setmaxnreg."  # a warpgroup's register count set in PTX (producer/consumer kernels)


def assemble(name: str, ptx: str, arch: str, directory: Path, fast_compile: str = "0") -> Resources:
    """ptxas PTX -> cubin in `directory`, or the cubin of the same PTX from
    the compile cache; a failure raises with a reproducer. A kernel that
    ptxas's fast levels leave with a performance loss (the flash kernel's
    wgmmas serialized, C7509, at `mid`) or spilling is assembled again at
    full optimization, and that cubin kept where it loses less. A kernel
    that sets its warps' registers (setmaxnreg, which the fast levels
    ignore: C7504) goes to full optimization at once."""
    if fast_compile != "0" and SETMAXNREG in ptx:
        return replace(_assemble_at(name, ptx, arch, directory, "0"), reassembled=FULL_FOR_SETMAXNREG)
    resources = _assemble_at(name, ptx, arch, directory, fast_compile)
    if fast_compile == "0" or not (resources.performance_notes or resources.spills):
        return resources
    cubin = directory / f"{name}.cubin"
    fast_cubin = cubin.read_bytes()
    full = _assemble_at(name, ptx, arch, directory, "0")
    if _losses(full) < _losses(resources):
        losses = [*resources.performance_notes] + ([f"{resources.spills} bytes spilled"] if resources.spills else [])
        return replace(full, reassembled=f"at --Ofast-compile={fast_compile}: {'; '.join(losses)}")
    cubin.write_bytes(fast_cubin)  # no better at full optimization: the fast level's cubin stays
    return resources


def _losses(resources: Resources) -> tuple[int, int]:
    """What a cubin loses, worst first: ptxas's performance notes, then its spilled bytes."""
    return len(resources.performance_notes), resources.spills


def _assemble_at(name: str, ptx: str, arch: str, directory: Path, fast_compile: str) -> Resources:
    ptxas = find_tool("ptxas")
    if ptxas is None:
        raise UsageError(PTXAS_HINT)
    (directory / f"{name}.ptx").write_text(ptx)
    command = [ptxas, f"-arch={arch}", f"--Ofast-compile={fast_compile}", "-v", "-o", f"{name}.cubin", f"{name}.ptx"]
    key = compile_cache.digest(ptx, *command[1:3], _ptxas_version(ptxas))
    cached = compile_cache.find_cubin(key)
    if cached is not None:
        (directory / f"{name}.cubin").write_bytes(cached[0])
        return parse_ptxas_report(cached[1])
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    if result.returncode != 0:
        first = next((line for line in result.stderr.splitlines() if line.strip()), "ptxas failed")
        repro = Reproducer("cubin", ptx, " ".join(shlex.quote(c) for c in command), result.stderr,
                           input_name=f"{name}.ptx")
        raise CompilerError("cubin", [f"{name}: {first}"], repro)
    compile_cache.store_cubin(key, (directory / f"{name}.cubin").read_bytes(), result.stderr)
    return parse_ptxas_report(result.stderr)


@functools.cache
def _ptxas_version(ptxas: str) -> str:
    return subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout


class Assembly:
    """ptxas on every kernel, running in the background (each kernel a
    process of its own, as many at once as there are cores) while the caller
    writes the stage dumps and the host plan; `resources()` waits for it,
    and its owner calls `cancel()` when done (artifact_writer)."""

    def __init__(self, ptx: dict[str, str], arch: str, directory: Path, fast_compile: str):
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(len(ptx), os.cpu_count() or 1)))
        self._futures = {name: self._pool.submit(assemble, name, text, arch, directory, fast_compile)
                         for name, text in ptx.items()}

    def resources(self) -> dict[str, Resources]:
        with phase("ptxas (waiting for it)"):
            return {name: future.result() for name, future in self._futures.items()}

    def cancel(self) -> None:
        """Drop the kernels not started yet and wait for the running ones (nothing half-written)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def parse_ptxas_report(text: str) -> Resources:
    registers = re.search(r"Used (\d+) registers", text)
    spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", text)
    shared = re.search(r"(\d+) bytes smem", text)
    notes = re.findall(r"\((C\d+)\) Potential Performance Loss: (.*?)(?: in the function '[^']*')?\.?$", text, re.MULTILINE)
    return Resources(int(registers.group(1)) if registers else 0, sum(map(int, spills)),
                     int(shared.group(1)) if shared else 0, tuple(f"{code}: {what}" for code, what in notes))


def start_kernels(compilation, directory: Path) -> Assembly:
    """Extract the kernels' PTX into DIRECTORY/kernels and start ptxas on them."""
    kernels_dir = directory / "kernels"
    kernels_dir.mkdir(parents=True)
    with phase("extract PTX"):
        ptx = extract_ptx(compilation.module)
    return Assembly(ptx, compilation.options.arch, kernels_dir, compilation.options.ptxas_fast_compile)


def package(compilation, directory: Path, assembly: Assembly) -> dict:
    """Write plan.json; wait for `assembly`; return the manifest's GPU entries."""
    try:
        with phase("host plan"):
            plan = extract_plan(compilation.module, compilation.exported, directory)
    except CompilerError:
        raise
    except Exception as e:  # a bug in plan extraction: still one line, naming the stage
        raise CompilerError("plan", [f"internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]}"]) from e
    resources = assembly.resources()
    tuning = tuning_notes(compilation.module)
    report = [kernel_entry(step, resources[step.get("binary", step["module"])], tuning.get(step["module"]))
              for step in plan.launches()]
    plan.write(directory / "plan.json")
    return {"arch": compilation.options.arch, "executable": "plan.json", "kernels": report,
            "functions": [{"name": name, "kind": "kernel module"} for name in resources]}


def tuning_notes(module) -> dict[str, dict]:
    """{kernel: {"key", "tile"}} of the matmul kernels (gpu-matmul-kernels' module attribute)."""
    from .passes.gpu_matmul_kernels import TUNING_ATTR
    attrs = module.operation.attributes
    if TUNING_ATTR not in attrs:
        return {}
    notes = ir.DictAttr(attrs[TUNING_ATTR])
    return {named.name: json.loads(ir.StringAttr(named.attr).value) for named in notes}


def kernel_entry(launch: dict, resources: Resources, tuning: dict | None = None) -> dict:
    return {
        "name": launch["module"],
        "path": launch.get("path", "generic"),
        "source_ops": launch["source_ops"],
        "source_keys": launch.get("source_keys", []),
        "grid": launch["grid"],
        "block": launch["block"],
        "registers": resources.registers,
        "spills": resources.spills,
        "shared_bytes": resources.shared_bytes + launch["dynamic_shared_bytes"],
        "bytes": launch["bytes"],
        "flops": launch["flops"],
        "cubin": f"kernels/{launch.get('binary', launch['module'])}.cubin",
        "ptx": f"kernels/{launch.get('binary', launch['module'])}.ptx",
        **({"tuning": tuning} if tuning else {}),
        **({"once": True} if launch.get("once") else {}),
        **({"ptxas_notes": list(resources.performance_notes)} if resources.performance_notes else {}),
        **({"ptxas_full_optimization": resources.reassembled} if resources.reassembled else {}),
    }
