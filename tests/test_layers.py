"""Import direction, checked against the layer table in docs/architecture.md.

A module imports only from its own unit and from units on lower layers; units on one layer do not
import each other. Every import statement counts, also those inside functions (lazy imports). The
table is read from the document, so the docs and this test cannot state two layerings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
# The repository's folders and the names they install under (setup.py maps them).
FOLDERS = {
    "idealized_runtime": "idealized_runtime",
    "cost_model": "idealized_runtime.cost_model",
    "local_runner": "idealized_runtime.local_runner",
    "api": "idealized_runtime.api",
    "benchmarks": "benchmarks",
}
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`([\w.]+)`\s*\|")


def layer_table(text: str | None = None) -> dict[str, int]:
    """unit -> layer, from the table under "## Layers" in docs/architecture.md."""
    text = ARCHITECTURE_DOC.read_text(encoding="utf-8") if text is None else text
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        if match := ROW.match(line):
            table[match.group(2)] = int(match.group(1))
    return table


LAYERS = layer_table()


def _unit(module: str) -> str | None:
    """The longest unit of the table that ``module`` is or lies in."""
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


def _python_files() -> list[Path]:
    return [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]


def layer_violations() -> list[str]:
    problems = []
    for path in _python_files():
        module = _module_name(path)
        own = _unit(module)
        if own is None:
            problems.append(f"{path.relative_to(ROOT)}: {module} is in no unit of the table")
            continue
        for line, imported in _imports(path, module):
            target = _unit(imported)
            # Outside the project, or its own unit: free. Else strictly lower layers only (an
            # import of a package's lazy exports counts as that package's unit).
            if target is None or target == own or LAYERS[target] < LAYERS[own]:
                continue
            where = path.relative_to(ROOT)
            problems.append(
                f"{where}:{line}: {own} (layer {LAYERS[own]}) imports {imported} "
                f"({target}, layer {LAYERS[target]})"
            )
    return problems


def test_every_import_runs_down_the_layer_table() -> None:
    problems = layer_violations()
    assert not problems, "layering violations:\n" + "\n".join(problems)


def test_the_table_is_read_from_the_document() -> None:
    assert LAYERS["idealized_runtime.core"] == 1
    assert (
        LAYERS["idealized_runtime.cost_model.hardware.counts"]
        < LAYERS["idealized_runtime.local_runner"]
    )
    assert LAYERS["idealized_runtime.api"] < LAYERS["idealized_runtime.cli"]
    assert LAYERS["benchmarks"] == max(LAYERS.values())


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from idealized_runtime.api.app import create_app\n")
    imports = _imports(module, "idealized_runtime.cost_model.fitting.m")
    assert imports == [(2, "idealized_runtime.api.app.create_app")]
    own = _unit("idealized_runtime.cost_model.fitting.m")
    target = _unit(imports[0][1])
    assert (own, target) == ("idealized_runtime.cost_model.fitting", "idealized_runtime.api")
    assert LAYERS[target] > LAYERS[own]


def _import_cycles(folder: str) -> list[list[str]]:
    """Cycles among a folder's modules, every import statement counted (lazy ones too)."""
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


def test_no_import_cycles() -> None:
    cycles = {folder: _import_cycles(folder) for folder in FOLDERS}
    assert not any(cycles.values()), cycles
