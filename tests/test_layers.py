"""Import direction: a module imports only its own layer or lower ones (see the layer list in the
developers' guide). Every import statement counts, also those inside functions (lazy imports)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The repository's folders and the names they install under (setup.py maps them).
FOLDERS = {
    "idealized_runtime": "idealized_runtime",
    "cost_model": "idealized_runtime.cost_model",
    "local_runner": "idealized_runtime.local_runner",
    "api": "idealized_runtime.api",
}
PACKAGES = tuple(FOLDERS)

# Longest prefix wins. Lowest layer first.
LAYERS: dict[str, int] = {
    "idealized_runtime": 1,  # the package's __init__ only; subpackages are listed below
    "idealized_runtime.core": 1,
    "idealized_runtime.cost_model": 2,
    "idealized_runtime.local_runner": 2,
    "idealized_runtime.timing": 2,
    "idealized_runtime.leaderboard": 3,
    "idealized_runtime.report": 3,
    "idealized_runtime.api": 4,
    "idealized_runtime.cli": 5,
    "idealized_runtime.bench": 5,
    "idealized_runtime.demo": 5,
    "idealized_runtime.processes": 5,
    "idealized_runtime.__main__": 5,
}
# Packages of layer 2 are independent of each other, except that the local runner may use the
# cost model's pure counting functions.
SIBLINGS_ALLOWED = {("idealized_runtime.local_runner", "idealized_runtime.cost_model")}


def _unit(module: str) -> str | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            return prefix
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([FOLDERS[parts[0]], *parts[1:]])


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` may name a submodule: judge the deepest known one.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _is_package_name(imported: str) -> bool:
    """``from idealized_runtime import X`` names something of the package's ``__init__``, unless
    X is one of the subpackages in the table."""
    return imported.count(".") <= 1 and f"idealized_runtime.{imported.split('.')[-1]}" not in LAYERS


def layer_violations() -> list[str]:
    problems = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = _module_name(path)
            own = _unit(module)
            if own is None:
                continue
            for line, imported in _imports(path, module):
                target = _unit(imported)
                if target is None or target == own:
                    continue
                if target == "idealized_runtime" and _is_package_name(imported):
                    continue
                higher = LAYERS[target] > LAYERS[own]
                sibling = (
                    LAYERS[target] == LAYERS[own] == 2 and (own, target) not in SIBLINGS_ALLOWED
                )
                if higher or sibling:
                    where = path.relative_to(ROOT)
                    problems.append(
                        f"{where}:{line}: {own} (layer {LAYERS[own]}) imports {imported} "
                        f"({target}, layer {LAYERS[target]})"
                    )
    return problems


def test_no_module_imports_a_higher_layer_or_an_independent_sibling() -> None:
    problems = layer_violations()
    assert not problems, "layering violations:\n" + "\n".join(problems)


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from idealized_runtime.api.app import create_app\n")
    assert _imports(module, "idealized_runtime.cost_model.m") == [
        (2, "idealized_runtime.api.app.create_app")
    ]
    assert _unit("idealized_runtime.api.app.create_app") == "idealized_runtime.api"
    assert _unit("idealized_runtime.cost_model.m") == "idealized_runtime.cost_model"


def _import_cycles(folder: str) -> list[list[str]]:
    """Cycles among a package's modules, every import statement counted (lazy ones too)."""
    paths = {_module_name(path): path for path in sorted((ROOT / folder).rglob("*.py"))}
    graph: dict[str, set[str]] = {module: set() for module in paths}
    for module, path in paths.items():
        for _, imported in _imports(path, module):
            parts = imported.split(".")
            for end in range(len(parts), 0, -1):
                candidate = ".".join(parts[:end])
                if candidate in graph:
                    if candidate != module and candidate != FOLDERS[folder]:
                        graph[module].add(candidate)
                    break
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_cost_model_has_no_import_cycles() -> None:
    assert _import_cycles("cost_model") == []
