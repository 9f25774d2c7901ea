"""The package's import graph: no module imports another's private names, and no import cycle.

Read from the source with ``ast``, so every import counts: at the top, inside a function, or under
``TYPE_CHECKING``. A cycle broken only by a function-level import still ties two modules into
one, which is how the argv contract once spread over two files that imported each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_iceberg

PACKAGE_DIR = Path(airflow_iceberg.__file__).parent


def package_modules(package_dir: Path) -> dict[str, tuple[Path, bool]]:
    """Every module under ``package_dir`` by dotted name, with its file and whether it is a package."""
    modules = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _imported_module(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_graph(package_dir: Path) -> tuple[dict[str, set[str]], list[str]]:
    """The package's modules with the package modules each imports, and every private name imported
    across modules (``from m import _x``, or ``m._x`` on an imported module)."""
    modules = package_modules(package_dir)
    edges: dict[str, set[str]] = {}
    private: list[str] = []
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges[name], module_aliases = _imports(tree, name, is_package, modules, private)
        private += [
            f"{name} uses {module_aliases[node.value.id]}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in module_aliases
            and _is_private(node.attr)
        ]
    return edges, sorted(set(private))


def _imports(
    tree: ast.AST, name: str, is_package: bool, modules: dict[str, tuple[Path, bool]], private: list[str]
) -> tuple[set[str], dict[str, str]]:
    """The package modules ``tree`` imports, and the names it binds to modules; notes private names."""
    imported: set[str] = set()
    module_aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    imported.add(alias.name)
                    module_aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and _imported_module(name, is_package, node) in modules:
            target = _imported_module(name, is_package, node)
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in modules:
                    module_aliases[alias.asname or alias.name] = submodule
                elif _is_private(alias.name):
                    private.append(f"{name} imports {target}.{alias.name}")
                imported.add(submodule if submodule in modules else target)
    return imported, module_aliases


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of the graph, one per strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(edges[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1 or module in edges[module]:
                cycles.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return cycles


def test_no_module_imports_another_modules_private_names() -> None:
    _, private = import_graph(PACKAGE_DIR)
    assert private == [], "give a shared helper a public name in the module that owns it"


def test_no_import_cycles() -> None:
    edges, _ = import_graph(PACKAGE_DIR)
    assert import_cycles(edges) == []


def test_the_graph_sees_lazy_imports_and_private_names(tmp_path: Path) -> None:
    """The checks above can fail: a cycle closed by a function-level import, and a private name."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import _helper\n")
    (package / "b.py").write_text("def _helper():\n    from pkg import a\n")
    edges, private = import_graph(package)
    assert import_cycles(edges) == [["pkg.a", "pkg.b"]]
    assert private == ["pkg.a imports pkg.b._helper"]
