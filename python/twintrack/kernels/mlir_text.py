"""A small writer of MLIR text with numbered SSA values and shared constants."""

from __future__ import annotations

import contextlib

LOCATION_ALIAS = "#twintrack_source"


class MlirWriter:
    """Every op written gets the location LOCATION_ALIAS, which the module
    text defines (see `module_text`): kernel ops then name the torch op."""

    def __init__(self):
        self.lines: list[str] = []
        self.constants: dict[tuple[int | float, str], str] = {}
        self._counter = 0
        self.indent = 2

    def fresh(self, stem: str = "v") -> str:
        self._counter += 1
        return f"%{stem}{self._counter}"

    def emit(self, text: str) -> None:
        opens_region = text.endswith("{")
        self.lines.append(" " * self.indent + text + ("" if opens_region else f" loc({LOCATION_ALIAS})"))

    def op(self, text: str, stem: str = "v") -> str:
        """Emit `%new = text` and return %new."""
        name = self.fresh(stem)
        self.emit(f"{name} = {text}")
        return name

    def index(self, value: int) -> str:
        return self.constant(value, "index")

    @contextlib.contextmanager
    def only_if(self, condition: str | None):
        """What the block emits, under `scf.if condition` (unguarded for None).
        The scf.yield is written out, so it carries the source location too."""
        if condition is None:
            yield
            return
        self.emit(f"scf.if {condition} {{")
        self.indent += 2
        yield
        self.emit("scf.yield")
        self.indent -= 2
        self.emit("}")

    def constant(self, value: int | float, type_: str) -> str:
        key = (value, type_)
        if key not in self.constants:
            self.constants[key] = f"%c{value}" if type_ == "index" else f"%cst{len(self.constants)}"
        return self.constants[key]

    def constant_lines(self) -> list[str]:
        return [f"  {name} = arith.constant {_literal(value, type_)} : {type_} loc({LOCATION_ALIAS})"
                for (value, type_), name in self.constants.items()]

    def tree(self, values: list[str], op: str, type_: str) -> str:
        """`op` over all `values`, combined pairwise: a dependency chain
        log2(n) ops deep instead of n, which is what a warp waits on."""
        while len(values) > 1:
            pairs = [self.op(f"{op} {a}, {b} : {type_}") for a, b in zip(values[::2], values[1::2])]
            values = pairs + values[len(pairs) * 2:]
        return values[0]

    # index arithmetic; a multiply or divide by 1 emits nothing (canonicalize folds the rest)
    def add(self, a: str, b: str) -> str:
        return self.op(f"arith.addi {a}, {b} : index")

    def mul(self, a: str, b: int) -> str:
        return a if b == 1 else self.op(f"arith.muli {a}, {self.index(b)} : index")

    def div(self, a: str, b: int) -> str:
        return a if b == 1 else self.op(f"arith.divui {a}, {self.index(b)} : index")

    def rem(self, a: str, b: int) -> str:
        return self.op(f"arith.remui {a}, {self.index(b)} : index")


def _literal(value, type_: str) -> str:
    if isinstance(value, str):  # as written, e.g. a hex float (infinities)
        return value
    if type_.startswith("vector<"):
        return f"dense<{float(value)}>"
    return str(float(value)) if type_.startswith(("f", "bf")) else str(int(value))


def module_text(body: str, location: str) -> str:
    """`body` as a module whose LOCATION_ALIAS is `location` (an MLIR location, `loc(...)`)."""
    return f"{LOCATION_ALIAS} = {location}\nmodule {{\n{body}}}\n"


def launch_module(symbol: str, kernel: str, arguments: list[tuple[str, str]], grid: tuple[int, int, int],
                  threads: int, w: MlirWriter, location: str, workgroup: list[tuple[str, str]] = (),
                  block_ids: tuple[str, str, str] = ("%block_x", "%block_y", "%block_z"),
                  dynamic_shared_bytes: int = 0) -> str:
    """A module holding `func.func private @symbol(arguments)`, which launches
    `w`'s lines as the kernel `kernel` (named differently from the function:
    the launch's symbol reference would otherwise keep the function alive)
    on `grid` blocks of `threads` threads; the body sees its block ids as
    `block_ids`, its thread id as %tid; `dynamic_shared_bytes` of dynamic
    shared memory (gpu.dynamic_shared_memory) go with the launch."""
    gx, gy, gz, tx, one = (w.index(v) for v in (*grid, threads, 1))
    dynamic = f" dynamic_shared_memory_size {w.constant(dynamic_shared_bytes, 'i32')}" if dynamic_shared_bytes else ""
    located = f"loc({LOCATION_ALIAS})"
    shared = f" workgroup({', '.join(f'{n} : {t}' for n, t in workgroup)})" if workgroup else ""
    lines = [
        f"func.func private @{symbol}({', '.join(f'{n}: {t}' for n, t in arguments)}) {{",
        *w.constant_lines(),
        f"  gpu.launch blocks({', '.join(block_ids)}) in (%gx = {gx}, %gy = {gy}, %gz = {gz})"
        f" threads(%tid, %ty, %tz) in (%tx_n = {tx}, %ty_n = {one}, %tz_n = {one}){dynamic}"
        f" module(@{kernel}) function(@{kernel}){shared} {{",
        *w.lines,
        f"    gpu.terminator {located}",
        f"  }} {located}",
        "  return",
        "}",
    ]
    return module_text("\n".join(lines) + "\n", location)
