"""Loops for the decompositions, built as torch's while_loop operator, so that
an iterative algorithm (Euclid, square-and-multiply, a recurrence, a series,
a matrix iteration) is one loop in the graph, not its steps unrolled at trace
time: the graph stays small whatever the trip count, and the trip count may
depend on the data.

torch-mlir imports the operator as torch.prim.Loop and lowers it to an
scf.while over tensors (passes/masked_loops.py takes it from there). A loop
built by `elementwise_while` is sunk into one linalg.generic whose payload
runs each element's own scalar loop, on the CPU and the GPU alike; one
built by `bounded_while` stays a loop on the CPU and is unrolled to its
bound for the GPU, whose host runs no loops, as does one built by
`counted_while`.

The functions given here must read tensors only through their arguments: a
tensor they close over would be traced into the loop as a constant.
"""

from __future__ import annotations

import functools

import torch
from torch._prims_common import make_contiguous_strides_for
from torch._higher_order_ops.while_loop import while_loop_op


def tensor_while(condition, body, state, inputs=()) -> tuple:
    """`state` after `while condition(*state, *inputs): state = body(*state,
    *inputs)`. `condition` returns a 0-d bool tensor; `body` a tuple of new
    tensors (none of them an argument) with `state`'s shapes and dtypes;
    `inputs` are tensors the loop reads and never changes (carried through
    it unchanged: torch-mlir's importer takes no other operands, nor a loop
    of one value, which gets a 0-d companion). Each goes in with a dense
    layout's strides, as the body's results come out (a view's would not
    match them, nor would a size-1 dim's stride, which `contiguous()` keeps)."""
    count, carried = len(state), tuple(_dense(value) for value in (*state, *inputs))
    padding = () if len(carried) > 1 else (carried[0].new_zeros(()),)

    def loop_condition(*values):
        return condition(*values[:len(carried)])

    def loop_body(*values):
        return (*body(*values[:len(carried)]), *(value.clone() for value in values[count:]))

    return tuple(while_loop_op(loop_condition, loop_body, (*carried, *padding), ()))[:count]


def _dense(value: torch.Tensor) -> torch.Tensor:
    if value.stride() == make_contiguous_strides_for(value.shape):
        return value
    return value.clone(memory_format=torch.contiguous_format)


def elementwise_while(step, active: torch.Tensor, state, inputs=()) -> tuple:
    """Per element: `while active: active, *state = step(*state, *inputs)`;
    returns the final state. `step` must be elementwise (each result element
    depends only on the same element of its arguments; `inputs` may
    broadcast); state and mask are broadcast to one shape. As a tensor loop,
    each step runs over every element while any is active and keeps its
    results only where the element is active, so `step` must be safe (no
    trap, such as an integer division by zero) on every element."""
    shape = torch.broadcast_shapes(active.shape, *(s.shape for s in state))
    active, state = active.expand(shape), tuple(s.expand(shape) for s in state)
    return tensor_while(lambda active, *carried: active.any(), _masked(step, len(state)), (active, *state), inputs)[1:]


def bounded_while(step, active: torch.Tensor, state, inputs=(), *, most: int) -> tuple:
    """Per batch element, at most `most` times: `while active: active,
    *state = step(i, *state, *inputs)`, i the step's number (a 0-d int64
    tensor, the same for every element); `active` broadcasts onto each
    state tensor (a matrix iteration: one flag per matrix). The bound lets
    a target whose host runs no loops unroll it (unroll-bounded-loops)."""
    count = torch.zeros((), dtype=torch.int64, device=active.device)

    def condition(i, active, *carried):
        return active.any() & (i < most)

    def body(i, *carried):
        return (i + 1, *_masked(functools.partial(step, i), len(state))(*carried))

    return tensor_while(condition, body, (count, active, *state), inputs)[2:]


def counted_while(step, trips: torch.Tensor, state, inputs=(), *, most: int) -> tuple:
    """Per batch element, `trips` times (whole numbers, at most `most`;
    `trips` broadcasts onto each state tensor): `*state = step(i, *state,
    *inputs)`, i the step's number (a 0-d int64 tensor). The steps a matrix
    takes depend on nothing but its count, so the GPU's unrolled copies
    each test a constant against it (no chain of masks)."""
    count = torch.zeros((), dtype=torch.int64, device=trips.device)

    def condition(i, *carried):
        return (i < carried[-1]).any() & (i < most)

    def body(i, *carried):
        *values, trips = carried
        new = step(i, *values)
        return (i + 1, *(torch.where(i < trips, value, old).to(old.dtype) for value, old in zip(new, values)))

    return tensor_while(condition, body, (count, *state), (*inputs, trips.to(torch.int64)))[1:]


def _masked(step, count: int):
    """The loop body of `step` over (active, *state, *inputs): each new
    value kept only where active; the mask cleared where `step` is done."""
    def body(active, *carried):
        going, *new = step(*carried)
        kept = (torch.where(active, value, old).to(old.dtype) for value, old in zip(new, carried[:count]))
        return (active & going, *kept)
    return body
