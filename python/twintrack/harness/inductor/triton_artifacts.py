"""Triton's intermediate files for Inductor's GPU kernels, and ptxas figures.

compile_with_inductor points TRITON_CACHE_DIR at a fresh directory, so every
Triton kernel of the model leaves `<kernel name>.{ttir,ttgir,llir,ptx}` there.
Registers and spills come from the loaded kernels (Inductor's autotuner keeps
them on each launcher), shared memory too; the profiler reports the same for
every kernel, library ones included.
"""

from __future__ import annotations

from pathlib import Path

from .capture import InductorKernel

IR_LEVELS = ("ttir", "ttgir", "llir", "ptx")


def attach_triton_artifacts(kernels: list[InductorKernel], cache_dir: str) -> None:
    files = _files_by_name(Path(cache_dir))
    launchers = _launchers()
    for kernel in kernels:
        if kernel.kind != "triton":
            continue
        for level in IR_LEVELS:
            found = files.get(f"{kernel.name}.{level}")
            if found:
                # Debug info names the temporary cache; reports should not carry machine paths.
                kernel.sources[level] = found.read_text(errors="replace").replace(cache_dir, "<inductor-cache>")
        launcher = launchers.get(kernel.name)
        if launcher is not None:
            kernel.registers = getattr(launcher, "n_regs", None)
            kernel.spills = getattr(launcher, "n_spills", None)
            kernel.shared_bytes = getattr(launcher, "shared", None)


def _files_by_name(root: Path) -> dict[str, Path]:
    """Newest file of each name under the Triton cache (autotuning may leave several)."""
    files: dict[str, Path] = {}
    for path in sorted(root.rglob("*"), key=lambda p: p.stat().st_mtime if p.is_file() else 0):
        if path.is_file() and path.suffix.lstrip(".") in IR_LEVELS:
            files[path.name] = path
    return files


def _launchers() -> dict[str, object]:
    """The chosen launcher of each Triton kernel in Inductor's loaded wrapper modules."""
    from torch._inductor.codecache import PyCodeCache
    modules = list(getattr(PyCodeCache, "modules", [])) + list(getattr(PyCodeCache, "modules_no_attr", {}).values())
    found = {}
    for module in modules:
        for name, value in vars(module).items():
            launchers = getattr(value, "launchers", None)
            if launchers:
                found[name] = launchers[0]
    return found
