"""The package's layering, read from every module's imports (those inside
functions too): a module imports only from its own layer or the layers
below it, except where ALLOWED names the import and says why. And no
module-level import cycle."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "twintrack"

# Top to bottom. A module belongs to the first layer one of whose prefixes
# it starts with.
LAYERS = [
    ("cli", ["twintrack.cli"]),
    ("harness", ["twintrack.harness"]),
    ("api", ["twintrack.api", "twintrack.dynamo_backend", "twintrack.dynamo_explain", "twintrack.cache_misses"]),
    ("compiler", ["twintrack.compiler"]),
    ("frontend", ["twintrack.frontend"]),
    ("runtime", ["twintrack.runtime"]),
    ("core", ["twintrack.errors", "twintrack.phases", "twintrack.locations", "twintrack.calling", "twintrack.dynamic_shapes",
              "twintrack.tooling", "twintrack.bindings", "twintrack.dialect", "twintrack._twintrack_cpp"]),
]

# (importer, imported): why it may run against the order.
ALLOWED = {
    ("twintrack", "twintrack.api"): "the package root's twintrack.compile and the rest, imported on first use",
    ("twintrack", "twintrack.dynamo_explain"): "the package root's twintrack.explain, imported on first use",
    ("twintrack.frontend.export", "twintrack.compiler.compile_cache"): "a model file's digest names it in the cache key",
    ("twintrack.frontend.export", "twintrack.harness.zoo"): "zoo:NAME model specs are loaded here",
    ("twintrack.harness.fuzz.chunk", "twintrack.cli.common"): "a chunk is a command of its own: SIGTERM stops it as the CLI's",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    if module == "twintrack":  # the package root: __version__, and the API imported lazily
        return len(LAYERS) - 1
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def imports_of(path: Path, module_level_only: bool = False) -> set[str]:
    """The twintrack modules `path` imports (a `from X import name` counts
    as X.name where that is a module, else as X)."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("twintrack"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("twintrack"):
                continue
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                found.add(candidate if _is_module(candidate) else source)
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists() or name.endswith("._twintrack_cpp")


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def upward_imports() -> set[tuple[str, str]]:
    return {(importer, imported) for importer, path in modules().items() for imported in imports_of(path)
            if _is_module(imported) and layer_of(imported) < layer_of(importer)}


def test_every_module_has_a_layer():
    for module in modules():
        layer_of(module)


def test_imports_follow_the_layers():
    upward = upward_imports()
    unexplained = sorted(upward - set(ALLOWED))
    assert not unexplained, "imports against the layer order (move the code, or add to ALLOWED with a reason):\n" + \
        "\n".join(f"  {a} -> {b}" for a, b in unexplained)
    stale = sorted(set(ALLOWED) - upward)
    assert not stale, f"ALLOWED names imports that no longer run against the order: {stale}"
    assert len(ALLOWED) <= 6


def test_no_module_level_import_cycle():
    graph = {name: {m for m in imports_of(path, module_level_only=True) if _is_module(m) and m != name}
             for name, path in modules().items()}
    visiting, done = set(), set()

    def visit(node, trail):
        visiting.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor in visiting:
                raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(successor):] + [successor]))
            if successor not in done:
                visit(successor, trail + [successor])
        visiting.discard(node)
        done.add(node)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
