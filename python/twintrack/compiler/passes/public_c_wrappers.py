"""public-c-wrappers: a C-interface wrapper for each public function only.

The JIT calls the entry through its C-interface wrapper (one pointer to
each memref descriptor). Upstream llvm-request-c-wrappers asks for one on
every function, so each outlined loop nest (outline-loop-nests: private,
called only from the entry) got a wrapper that nothing calls, and LLVM
optimized and compiled it all the same."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .ir_helpers import PythonPass, defined_functions

C_INTERFACE = "llvm.emit_c_interface"


@dataclass(frozen=True)
class PublicCWrappers(PythonPass):
    name = "public-c-wrappers"

    def _run(self, module: ir.Operation, pass_) -> None:
        for function in defined_functions(module):
            visibility = function.attributes["sym_visibility"] if "sym_visibility" in function.attributes else None
            if visibility is None or ir.StringAttr(visibility).value == "public":
                function.attributes[C_INTERFACE] = ir.UnitAttr.get()
