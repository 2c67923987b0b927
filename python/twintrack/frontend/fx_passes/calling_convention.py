"""The last FX pass: the program made to return each computed tensor once,
with the calling convention (calling.py) that rebuilds what the module
returned."""

from __future__ import annotations

import dataclasses
import operator

import torch
import torch.utils._pytree as pytree
from torch.export.graph_signature import ExportGraphSignature, InputKind, OutputKind, OutputSpec, TensorArgument

from ...calling import JSON_CONSTANTS, CallingConvention, Guard, Mutation, OutputLeaf
from ...errors import ModelLoadError


def functional_results(program: torch.export.ExportedProgram, where: str, violations: list | None = None,
                       complex_outputs: set[int] = frozenset(),
                       lengths: dict | None = None,
                       complex_arguments: set[str] = frozenset(),
                       storage_orders: dict[str, tuple[int, ...]] | None = None,
                       result_orders: dict[int, tuple[int, ...]] | None = None) -> tuple[torch.export.ExportedProgram, CallingConvention]:
    """`program` rewritten to return each computed tensor once, the updated
    inputs first and the guards' flags (`violations`, frontend/fx_passes/guards.py)
    last, with no mutation left in its signature (a new program over the
    same graph, which is edited in place); and the convention that rebuilds
    the module's outputs from those results. The outputs at
    `complex_outputs` are real pairs of complex values (frontend/fx_passes/complex_pairs.py);
    each output in `lengths` is cut to the count its node holds
    (frontend/fx_passes/bounded_outputs.py). The inputs named in
    `complex_arguments` are taken as their real pairs, those in
    `storage_orders` with their dims in memory order, and the outputs at
    `result_orders` are returned in memory order (fx_passes/storage_order.py)."""
    lengths = lengths or {}
    signature, original = _without_effect_tokens(program, where)
    arguments = signature.user_inputs
    output_node = program.graph.output_node()
    values = list(output_node.args[0])
    results: dict[torch.fx.Node, int] = {}  # in first-use order

    def result_of(node: torch.fx.Node) -> int:
        return results.setdefault(node, len(results))

    mutations, written = [], {}
    for spec, value in zip(signature.output_specs, values):
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            mutations.append(Mutation(result_of(value), arguments.index(spec.target)))
            written[value] = mutations[-1].argument
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            raise ModelLoadError(f"{where}: the model updates buffer '{spec.target}' (train mode?), "
                                 f"which a frozen compile cannot write back; compile without --freeze")
        elif spec.kind != OutputKind.USER_OUTPUT:
            raise ModelLoadError(f"{where}: unsupported output kind {spec.kind.name} of torch.export")
    user_outputs = [(original[p], value) for p, (spec, value) in enumerate(zip(signature.output_specs, values))
                    if spec.kind == OutputKind.USER_OUTPUT]  # by their positions before the tokens went
    positions = [position for position, _ in user_outputs]
    leaves = [_leaf(value, arguments, written, result_of, where, position in complex_outputs)
              for position, value in user_outputs]
    leaves = [dataclasses.replace(leaf, length=result_of(lengths[p])) if p in lengths else leaf
              for p, leaf in zip(positions, leaves)]
    leaves = [dataclasses.replace(leaf, storage_order=tuple(result_orders[p])) if p in (result_orders or {}) else leaf
              for p, leaf in zip(positions, leaves)]
    guards = [Guard(result_of(v.flag), v.kind, v.message) for v in violations or []]
    out_spec = program.call_spec.out_spec
    functional = _returning_only(program, signature, list(results))
    _drop_unused_scalar_reads(functional.graph)
    complex_positions = [position for position, name in enumerate(arguments) if name in complex_arguments]
    orders = {position: tuple(storage_orders[name]) for position, name in enumerate(arguments)
              if name in (storage_orders or {})}
    return functional, CallingConvention(out_spec, leaves, mutations, guards, complex_positions, orders)


def _without_effect_tokens(program: torch.export.ExportedProgram, where: str) -> tuple[ExportGraphSignature, list[int]]:
    """Remove torch.export's effect tokens from the graph (in place): the
    TOKEN input and output and each `with_effects` node threading it; the
    signature without them. Tokens order ops with
    side effects; the ones export makes here are error checks
    (aten._linalg_check_errors after linalg.inv, cholesky, lu_factor) whose
    only result is the token, so dropping them drops the check and nothing
    else. An effectful op whose own results are used is refused. Also
    returns each kept output's position among the original outputs: the
    positions the passes before this one recorded (complex, bounded and
    permuted results)."""
    graph = program.graph
    specs = program.graph_signature.output_specs
    effects = [n for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.higher_order.with_effects]
    if not effects and all(s.kind != OutputKind.TOKEN for s in specs):
        return program.graph_signature, list(range(len(specs)))
    for node in effects:
        if any(user.target is not operator.getitem or user.args[1] != 0 for user in node.users):
            raise ModelLoadError(f"{where}: side-effect op {node.args[1]} whose results are used is not supported")
    output_node = graph.output_node()
    kept = [(p, s, v) for p, (s, v) in enumerate(zip(specs, output_node.args[0])) if s.kind != OutputKind.TOKEN]
    output_node.args = (tuple(v for _, _, v in kept),)
    for node in reversed(effects):
        for user in list(node.users):
            graph.erase_node(user)
        graph.erase_node(node)
    tokens = [s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.TOKEN]
    for node in [n for n in graph.nodes if n.op == "placeholder" and n.name in tokens]:
        if node.users:
            raise ModelLoadError(f"{where}: effect token used outside with_effects is not supported")
        graph.erase_node(node)
    inputs = [s for s in program.graph_signature.input_specs if s.kind != InputKind.TOKEN]
    return ExportGraphSignature(inputs, [s for _, s, _ in kept]), [p for p, _, _ in kept]


SCALAR_READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default)


def _leaf(value, arguments: list[str], written: dict, result_of, where: str, is_complex: bool) -> OutputLeaf:
    if isinstance(value, torch.fx.Node) and value.target in SCALAR_READS and isinstance(value.args[0], torch.fx.Node):
        tensor = _leaf(value.args[0], arguments, written, result_of, where, False)
        return dataclasses.replace(tensor, scalar=True)  # `.item()` after the call
    if isinstance(value, torch.fx.Node):
        if value.op == "placeholder" and value.name in arguments:
            return OutputLeaf("argument", arguments.index(value.name), complex=is_complex)
        if value in written:  # an in-place update returned: eager returns the input itself
            return OutputLeaf("argument", written[value])
        if not isinstance(value.meta.get("val"), torch.Tensor):
            raise ModelLoadError(f"{where}: output {value.name} is a {type(value.meta.get('val')).__name__}, "
                                 f"not a tensor (symbolic outputs are not supported)")
        return OutputLeaf("result", result_of(value), complex=is_complex)
    if not isinstance(value, JSON_CONSTANTS):
        raise ModelLoadError(f"{where}: the model returns a {type(value).__name__} constant; "
                             f"only tensors, None, bools, numbers and strings are supported")
    return OutputLeaf("constant", value=value)


def _drop_unused_scalar_reads(graph: torch.fx.Graph) -> None:
    """Erase each `.item()` that now only feeds export's checks of its value
    (u0 >= 0 ...), with those checks: the value is read after the call."""
    order = {n: i for i, n in enumerate(graph.nodes)}  # erasing keeps the others' order
    for node in [n for n in graph.nodes if n.target in SCALAR_READS]:
        descendants, frontier = set(), [node]
        while frontier:
            for user in frontier.pop().users:
                if user not in descendants:
                    descendants.add(user)
                    frontier.append(user)
        if any(d.op == "output" or isinstance(d.meta.get("val"), torch.Tensor) for d in descendants):
            continue
        for dead in sorted(descendants | {node}, key=order.get, reverse=True):
            graph.erase_node(dead)


def _returning_only(program: torch.export.ExportedProgram, signature: ExportGraphSignature,
                    results: list[torch.fx.Node]) -> torch.export.ExportedProgram:
    """The program over the same graph whose output is `results`, each a
    plain user output."""
    output_node = program.graph.output_node()
    output_node.args = (tuple(results),)
    program.graph_module.recompile()
    specs = [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(node.name), None) for node in results]
    call_graph = list(program.module_call_graph)  # the entry replaced, not deep-copied (torch warns on copying specs)
    if call_graph[0].signature is not None:
        out_spec = pytree.tree_structure(tuple(range(len(results))))
        call_graph[0] = dataclasses.replace(call_graph[0],
                                            signature=dataclasses.replace(call_graph[0].signature, out_spec=out_spec))
    return torch.export.ExportedProgram(
        root=program.graph_module, graph=program.graph,
        graph_signature=ExportGraphSignature(list(signature.input_specs), specs),
        state_dict=program.state_dict, range_constraints=program.range_constraints,
        module_call_graph=call_graph, example_inputs=program.example_inputs, constants=program.constants,
        verifiers=program.verifiers)
