"""Run one Python pass on an MLIR file: python -m twintrack.passes NAME FILE."""

import sys

from mlir import ir
from mlir.passmanager import PassManager

from ..bindings import new_context
from . import REGISTRY, instantiate, pass_name


def main(argv: list[str]) -> int:
    names = argv[0].split(",") if argv else []
    if len(argv) != 2 or not names or any(pass_name(n) not in REGISTRY for n in names):
        print(f"usage: python -m twintrack.passes NAME[{{option=value ...}}][,NAME...] FILE.mlir"
              f"  (NAME: {', '.join(REGISTRY)})", file=sys.stderr)
        return 2
    path = argv[1]
    with new_context("mlir"), ir.Location.unknown():
        module = ir.Module.parse(open(path).read())
        pm = PassManager()
        for name in names:
            instantiate(name).add_to(pm)
        pm.run(module.operation)
        print(module)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
