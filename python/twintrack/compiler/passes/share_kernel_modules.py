"""share-kernel-modules: a gpu.module that is an earlier one but for its
name (the same layer again: ResNet's repeated blocks, a transformer's
layers) goes. Its launches call the earlier module's kernel and keep their
own name in `twintrack.kernel_name`, which the host plan, the kernel report
and the profiler ranges show, and their own torch source locations
(annotate-kernels' attributes, recorded here before the module goes). NVVM,
PTX and ptxas then see each distinct kernel once."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from mlir import ir

from ...dialect import operation_text
from .annotate_kernels import annotate_sources
from .ir_helpers import PythonPass, gpu_functions, kernel_launches, kernel_ref, symbol_name

KERNEL_NAME_ATTR = "twintrack.kernel_name"  # on a gpu.launch_func: its own name, where it runs another's kernel
# On a gpu.module compared with the others already. Each kernel stage (and
# annotate, for the generic kernels) builds its own kinds of kernel, each
# kind's path written in its body, so a later stage's module never repeats
# an earlier stage's, and is compared only with the modules new with it.
COMPARED_ATTR = "twintrack.compared"
_PLACEHOLDER = "twintrack_shared_kernel"


def renamed(text: str, name: str, new_name: str) -> str:
    """`text` with the symbol `name`, and the symbols it begins (its
    parameters, `name_param_0`), called `new_name`; not inside a longer name
    (kernel_3 in kernel_30)."""
    return re.sub(rf"\b{re.escape(name)}(?![0-9A-Za-z])", new_name, text)


def _text_but_names(module: ir.Operation) -> str:
    """The gpu.module's text with its own name and its functions' names
    neutral, so that two modules alike but for their names print alike:
    renamed in place for the printing (renaming the text afterwards took
    longer than printing it)."""
    name = symbol_name(module)
    functions = [op.operation for op in module.regions[0].blocks[0].operations if "sym_name" in op.operation.attributes]
    own = [(op, symbol_name(op)) for op in functions]
    for op, symbol in [(module, name), *own]:
        op.attributes["sym_name"] = ir.StringAttr.get(renamed(symbol, name, _PLACEHOLDER))
    try:
        return operation_text(module, assume_verified=True, use_local_scope=True)
    finally:
        for op, symbol in [(module, name), *own]:
            op.attributes["sym_name"] = ir.StringAttr.get(symbol)


@dataclass(frozen=True)
class ShareKernelModules(PythonPass):
    name = "share-kernel-modules"

    def _run(self, module: ir.Operation, pass_) -> None:
        first_with, shared = {}, {}
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name != "gpu.module" or COMPARED_ATTR in op.operation.attributes:
                continue  # compared when its stage ended: no later stage builds a kernel of its kind
            name = symbol_name(op.operation)
            first = first_with.setdefault(_text_but_names(op.operation), name)
            if first != name:
                shared[name] = (first, op.operation)
            op.operation.attributes[COMPARED_ATTR] = ir.UnitAttr.get()
        if not shared:
            return
        kernels = gpu_functions(module)
        launches_of = defaultdict(list)
        for launch in kernel_launches(module):
            launches_of[kernel_ref(launch)[0]].append(launch)
        for module_name, (first, erased) in shared.items():
            for launch in launches_of[module_name]:
                kernel_name = kernel_ref(launch)[1]
                annotate_sources(launch, kernels[(module_name, kernel_name)])  # its own locations, before its kernel goes
                if KERNEL_NAME_ATTR not in launch.attributes:  # shared before: it keeps its first own name
                    launch.attributes[KERNEL_NAME_ATTR] = ir.StringAttr.get(module_name)
                launch.attributes["kernel"] = ir.SymbolRefAttr.get([first, renamed(kernel_name, module_name, first)])
            erased.erase()
