"""The two MLIR Python bindings twintrack uses in one process.

torch-mlir ships its own MLIR/LLVM, the upstream `mlir` wheel another
(libLLVM.so). The upstream one must be loaded first: if torch-mlir's library
comes first, the JIT's symbol resolution in libLLVM.so binds to the wrong copy
and looks up garbage names (e.g. 'pl_vtgammaq_f32', 'ockfile').
"""

from __future__ import annotations

import importlib


class Bindings:
    def __init__(self, package: str):
        self.ir = importlib.import_module(f"{package}.ir")
        self.passmanager = importlib.import_module(f"{package}.passmanager")


_LOADED: dict[str, Bindings] = {}


def bindings(package: str) -> Bindings:
    """'mlir' or 'torch_mlir'; loading torch_mlir loads upstream mlir first."""
    if package not in _LOADED:
        if package == "torch_mlir":
            bindings("mlir")
            importlib.import_module("mlir.execution_engine")
        _LOADED[package] = Bindings(package)
    return _LOADED[package]


def new_context(package: str):
    """A fresh context of `package`'s bindings with twintrack's dialects in it:
    torch-mlir's torch dialect, or (upstream) twintrack's own."""
    context = bindings(package).ir.Context()
    if package == "torch_mlir":
        # The dialect's library alone: its Python op classes (torch_mlir.dialects.torch)
        # take 0.2 s to import, and only passes that build torch ops need them.
        from torch_mlir._mlir_libs._torchMlir import register_dialect
        register_dialect(context)
    else:
        from .dialect import register
        register(context)
    return context
