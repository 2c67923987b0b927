"""`tensor_meta` refreshed from `val` after the rewrites."""

from __future__ import annotations

import torch
from torch.fx.passes.shape_prop import _extract_tensor_metadata


def refresh_tensor_metadata(program: torch.export.ExportedProgram) -> None:
    """torch-mlir's importer types a value by its `tensor_meta` before its
    `val`; the rewrites above update `val` only (a bounded result's rows
    become static), so a stale `tensor_meta` would import as a dynamic
    dimension that the torch stage no longer refines."""
    for node in program.graph.nodes:
        value, meta = node.meta.get("val"), node.meta.get("tensor_meta")
        if isinstance(value, torch.Tensor) and meta is not None and _described(meta) != _described(value):
            node.meta["tensor_meta"] = _extract_tensor_metadata(value)


def _described(tensor) -> tuple[str, str]:
    """Shape and dtype as text: comparing a symbolic size would guard on it."""
    return str(getattr(tensor, "shape", None)), str(getattr(tensor, "dtype", None))
