"""Checks on a host plan (plan.json) that need no GPU."""

from __future__ import annotations

import math

KNOWN_OPS = {"alloc", "constant", "free", "copy", "launch"}
MAX_THREADS_PER_BLOCK = 1024


def _view_problems(where: str, view: dict, live: dict) -> list[str]:
    buffer = view["buffer"]
    if buffer not in live:
        return [f"{where}: buffer {buffer} is not live"]
    extent = view["offset"] + sum((s - 1) * st for s, st in zip(view["sizes"], view["strides"]) if s > 0)
    if any(s == 0 for s in view["sizes"]):
        return []
    if view["offset"] < 0 or extent >= live[buffer]:
        return [f"{where}: view of {buffer} reaches element {extent}, buffer has {live[buffer]}"]
    return []


def validate_plan(plan: dict) -> list[str]:
    """Every problem found: buffers used before allocation or after free,
    views out of bounds, launches with bad shapes. Empty means valid."""
    problems = []
    live = {f"arg{i}": math.prod(a["shape"]) for i, a in enumerate(plan["arguments"])}
    constants = set()  # global constants live for the whole run
    for index, step in enumerate(plan["steps"]):
        where = f"step {index} ({step.get('op')})"
        op = step.get("op")
        if op not in KNOWN_OPS:
            problems.append(f"{where}: unknown op")
        elif op in ("alloc", "constant"):
            if step["buffer"] in live:
                problems.append(f"{where}: {step['buffer']} allocated twice")
            live[step["buffer"]] = math.prod(step["shape"])
            if op == "constant":
                constants.add(step["buffer"])
        elif op == "free":
            if live.pop(step["buffer"], None) is None:
                problems.append(f"{where}: {step['buffer']} freed but not live")
        elif op == "copy":
            problems += _view_problems(where, step["src"], live) + _view_problems(where, step["dst"], live)
            if step["src"]["sizes"] != step["dst"]["sizes"]:
                problems.append(f"{where}: copy between shapes {step['src']['sizes']} and {step['dst']['sizes']}")
        elif op == "launch":
            if len(step["grid"]) != 3 or len(step["block"]) != 3 or min(step["grid"] + step["block"]) < 1:
                problems.append(f"{where}: bad grid {step['grid']} / block {step['block']}")
            elif math.prod(step["block"]) > MAX_THREADS_PER_BLOCK:
                problems.append(f"{where}: {math.prod(step['block'])} threads per block")
            for arg in step["args"]:
                if "memref" in arg:
                    problems += _view_problems(where, arg["memref"], live)
    leaked = sorted(b for b in live if not b.startswith("arg") and b not in constants)
    if leaked:
        problems.append(f"buffers never freed: {', '.join(leaked)}")
    return problems
