"""Run Python passes on an MLIR file: python -m twintrack.compiler.passes NAME[,NAME...] FILE.

The file is parsed in the bindings the passes run in: upstream MLIR's, or
torch-mlir's for a pass that declares `binding = "torch_mlir"` (it runs in a
stage before `legalize`, on the torch and tm_tensor dialects)."""

import sys

from ...bindings import bindings, new_context
from . import PASSES, instantiate, pass_class, pass_name


def _binding(names: list[str]) -> str:
    kinds = {getattr(pass_class(pass_name(n)), "binding", "mlir") for n in names}
    if len(kinds) > 1:
        raise SystemExit("python -m twintrack.compiler.passes: these passes run in different bindings; run them one by one")
    return kinds.pop()


def main(argv: list[str]) -> int:
    names = argv[0].split(",") if argv else []
    if len(argv) != 2 or not names or any(pass_name(n) not in PASSES for n in names):
        print(f"usage: python -m twintrack.compiler.passes NAME[{{option=value ...}}][,NAME...] FILE.mlir"
              f"  (NAME: {', '.join(PASSES)})", file=sys.stderr)
        return 2
    package = _binding(names)
    ir, passmanager = bindings(package).ir, bindings(package).passmanager
    with new_context(package), ir.Location.unknown():
        if package == "torch_mlir":
            from .lower_scatters import load_tm_tensor
            load_tm_tensor(ir)
        module = ir.Module.parse(open(argv[1]).read())
        pm = passmanager.PassManager()
        for name in names:
            instantiate(name).add_to(pm)
        pm.run(module.operation)
        print(module)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
