"""A host plan captured once as a CUDA graph and replayed with the caller's
tensors patched into its kernel nodes.

A replay copies nothing: each kernel node that reads or writes a caller's
tensor (a parameter, a buffer, an input or an output) gets that tensor's
address through cuGraphExecKernelNodeSetParams when it differs from the
last replay's, and outputs are fresh tensors. Only a tensor a plan's copy
step touches cannot be patched (the copy is torch's kernel, its addresses
baked into the graph): an input is copied into the captured one, an output
cloned from it, and a parameter or buffer rebinds by capturing again.

A graph holds one plan at one set of sizes (its grids, views and scalar
arguments baked in): a dynamic plan has one graph per set of sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .cuda_driver import CudaError, LaunchParameters, PreparedLaunch, _driver, check, current_stream


def copied_buffers(plan: dict) -> set[str]:
    """The plan's arguments (argN) that a copy step reads or writes."""
    return {view["buffer"] for step in plan["steps"] if step["op"] == "copy"
            for view in (step["src"], step["dst"]) if view["buffer"].startswith("arg")}


@dataclass
class PatchedNode:
    """One kernel node and the caller's buffers it uses."""
    handle: object                       # driver.CUgraphNode
    parameters: LaunchParameters         # the node's own block: captured addresses, the caller's patched in
    params: object                       # driver.CUDA_KERNEL_NODE_PARAMS over `parameters`
    caller_buffers: tuple[str, ...]
    bound: dict[str, int] = field(default_factory=dict)

    def patch(self, executable_graph, addresses: dict[str, int]) -> None:
        wanted = {b: addresses[b] for b in self.caller_buffers}
        if wanted == self.bound:
            return
        self.parameters.point(wanted)
        check(_driver().cuGraphExecKernelNodeSetParams(executable_graph, self.handle, self.params),
              "patching a CUDA graph's kernel node")
        self.bound = wanted


class GraphReplay:
    """A plan of `executable` (a GpuExecutable) as one CUDA graph."""

    def __init__(self, executable, sized, tensors: list[torch.Tensor], patching: bool = True):
        """`sized` is the executable's plan at the sizes of `tensors` (a
        SizedPlan: its `plan` holds numbers only). Without `patching` (a
        driver or torch that cannot patch a node), every argument is treated
        as a copy step's: bound at capture."""
        self.executable, self.sized = executable, sized
        arguments = sized.plan["arguments"]
        self.names = [f"arg{i}" for i in range(len(arguments))]
        first_input = next((i for i, a in enumerate(arguments) if a["kind"] == "input"), len(arguments))
        self.kinds = ["static" if a["kind"] == "input" and i - first_input in executable.static_inputs else a["kind"]
                      for i, a in enumerate(arguments)]
        output_names = [name for name, spec in zip(self.names, arguments) if spec["kind"] == "output"]
        self.outputs = list(zip(output_names, sized.output_layouts))
        self.patching = patching
        self.copied = copied_buffers(sized.plan) if patching else set(self.names)
        self._capture(tensors)

    def accepts(self, tensors) -> bool:
        """False when a parameter, buffer or static input that a copy step uses is a new tensor: capture again."""
        return all(t.data_ptr() == self.bound[name].data_ptr()
                   for name, kind, t in zip(self.names, self.kinds, tensors)
                   if name in self.copied and kind != "input")

    def __call__(self, tensors) -> list[torch.Tensor]:
        outputs = [self.bound[name] if name in self.copied else self.executable.empty_output(layout)
                   for name, layout in self.outputs]
        for name, kind, tensor in zip(self.names, self.kinds, tensors):
            if name in self.copied and kind == "input":
                self.bound[name].copy_(tensor)
        addresses = {name: t.data_ptr() for name, t in zip(self.names, list(tensors) + outputs)}
        for node in self.nodes:
            node.patch(self.exec, addresses)
        self._launch()
        return [output.clone() if name in self.copied else output
                for (name, _), output in zip(self.outputs, outputs)]

    def _launch(self) -> None:
        """Replay on torch's current stream: through the driver where the
        graph's executable handle is at hand (torch's replay costs a few
        microseconds more, for random-number state this plan never captures)."""
        if self.exec is None:
            self.graph.replay()
            return
        result = self._graph_launch(self.exec, current_stream())
        if result[0] != 0:
            check(result, "replaying a CUDA graph")

    def _capture(self, tensors) -> None:
        executable = self.executable
        arguments = [t.clone() if name in self.copied and kind == "input" else t
                     for name, kind, t in zip(self.names, self.kinds, tensors)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            executable._run(arguments, self.sized)  # loads the kernel modules: not allowed during capture
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph(keep_graph=True) if self.patching else torch.cuda.CUDAGraph()
        launches: list[tuple[PreparedLaunch, dict[str, int]]] = []
        with executable.recording_launches(launches), torch.cuda.graph(self.graph):
            outputs = executable._run(arguments, self.sized)
        self.bound = dict(zip(self.names, arguments + outputs))
        self.nodes, self.exec = [], None
        if self.patching:
            self.graph.instantiate()
            self._find_nodes(launches)

    def _find_nodes(self, launches) -> None:
        driver = _driver()
        self.exec = driver.CUgraphExec(self.graph.raw_cuda_graph_exec())
        self._graph_launch = driver.cuGraphLaunch
        handles = _kernel_nodes_in_order(driver.CUgraph(self.graph.raw_cuda_graph()))
        self.nodes = _patched_nodes(launches, handles, {n for n in self.names if n not in self.copied})
        captured = {name: t.data_ptr() for name, t in self.bound.items()}
        for node in self.nodes:
            node.bound = {b: captured[b] for b in node.caller_buffers}


def _patched_nodes(launches, handles, patchable: set[str]) -> list[PatchedNode]:
    """Pair each captured launch with its kernel node, in order (torch's own
    copy kernels in between are skipped); keep those using a patchable buffer."""
    nodes = []
    position = 0
    for prepared, addresses in launches:
        while position < len(handles) and int(_node_function(handles[position])) != int(prepared.function):
            position += 1
        if position == len(handles):
            raise CudaError(f"the captured graph has no kernel node for {prepared.what}")
        caller = tuple(sorted(prepared.parameters.buffers & patchable))
        if caller:
            parameters = LaunchParameters(prepared.args, prepared.what)
            parameters.point(addresses)
            nodes.append(PatchedNode(handles[position], parameters, prepared.node_parameters(parameters), caller))
        position += 1
    return nodes


def _node_function(node):
    return check(_driver().cuGraphKernelNodeGetParams(node), "reading a CUDA graph's kernel node").func


def _kernel_nodes_in_order(graph) -> list:
    """The graph's kernel nodes in dependency order (a stream's capture is a chain)."""
    driver = _driver()
    count = check(driver.cuGraphGetNodes(graph, 0), "counting a CUDA graph's nodes")[1]
    nodes = check(driver.cuGraphGetNodes(graph, count), "listing a CUDA graph's nodes")[0]
    edge_count = check(driver.cuGraphGetEdges(graph, 0), "counting a CUDA graph's edges")[-1]
    sources, targets = check(driver.cuGraphGetEdges(graph, edge_count), "listing a CUDA graph's edges")[:2]
    waiting = {int(n): 0 for n in nodes}
    following: dict[int, list] = {int(n): [] for n in nodes}
    for source, target in zip(sources, targets):
        waiting[int(target)] += 1
        following[int(source)].append(target)
    ready = [n for n in nodes if waiting[int(n)] == 0]
    ordered = []
    while ready:
        node = ready.pop(0)
        ordered.append(node)
        for target in following[int(node)]:
            waiting[int(target)] -= 1
            if waiting[int(target)] == 0:
                ready.append(target)
    kernel = driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
    return [n for n in ordered if check(driver.cuGraphNodeGetType(n), "a CUDA graph node's type") == kernel]
