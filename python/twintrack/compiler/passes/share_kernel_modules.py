"""share-kernel-modules: a gpu.module that is an earlier one but for its
name (the same layer again: ResNet's repeated blocks, a transformer's
layers) goes. Its launches call the earlier module's kernel and keep their
own name in `twintrack.kernel_name`, which the host plan, the kernel report
and the profiler ranges show. NVVM, PTX and ptxas then see each distinct
kernel once."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir

from .ir_helpers import PythonPass, nested_ops

KERNEL_NAME_ATTR = "twintrack.kernel_name"  # on a gpu.launch_func: its own name, where it runs another's kernel


def renamed(text: str, name: str, new_name: str) -> str:
    """`text` with the symbol `name`, and the symbols it begins (its
    parameters, `name_param_0`), called `new_name`; not inside a longer name
    (kernel_3 in kernel_30)."""
    return re.sub(rf"\b{re.escape(name)}(?![0-9A-Za-z])", new_name, text)


def _kernel_ref(launch: ir.Operation) -> tuple[str, str]:
    module_name, kernel_name = (part.strip("@") for part in str(launch.attributes["kernel"]).split("::"))
    return module_name, kernel_name


@dataclass(frozen=True)
class ShareKernelModules(PythonPass):
    name = "share-kernel-modules"

    def _run(self, module: ir.Operation, pass_) -> None:
        first_with, shared = {}, {}
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name != "gpu.module":
                continue
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            text = op.operation.get_asm(assume_verified=True, use_local_scope=True)
            first = first_with.setdefault(renamed(text, name, "<kernel>"), name)
            if first != name:
                shared[name] = (first, op.operation)
        for launch in nested_ops(module, lambda op: op.name == "gpu.launch_func"):
            module_name, kernel_name = _kernel_ref(launch)
            if module_name in shared:
                first = shared[module_name][0]
                launch.attributes[KERNEL_NAME_ATTR] = ir.StringAttr.get(module_name)
                launch.attributes["kernel"] = ir.SymbolRefAttr.get([first, renamed(kernel_name, module_name, first)])
        for _, op in shared.values():
            op.erase()
