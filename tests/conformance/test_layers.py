"""The import graph keeps its layers: every import of rlspec's own code runs downward (or within a layer), and
no module imports itself back through others (no import circle).

    0  oracle, refimpl, rlspec                          (each independent of the others and of conformance)
    1  records: conformance/{__init__, errors, tolerances}.py, spec/, records/, vectors/
    2  runner: conformance/runner/
    3  frameworks/, mutants/, bench/, experiments/, trace/, trainer_verify.py, trainer_trace.py
    4  CLI and site: commands/, cli.py, pytest_plugin.py, test_adapter_conformance.py, site/, readme.py

Every import statement counts, at module level or inside a function. What a lower layer reaches by
discovery (the framework homes' folders and the mutants package, imported by name: runner/discovery.py,
records/presets.py) is no import statement and is not an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("oracle", "refimpl", "rlspec", "conformance")
LAYER_OF_PREFIX = (  # the first prefix that matches a module's dotted name decides its layer
    ("oracle", 0), ("refimpl", 0), ("rlspec", 0),
    ("conformance.runner", 2),
    ("conformance.frameworks", 3), ("conformance.mutants", 3), ("conformance.bench", 3),
    ("conformance.experiments", 3), ("conformance.trainer_verify", 3), ("conformance.trace", 3),
    ("conformance.trainer_trace", 3),
    ("conformance.commands", 4), ("conformance.cli", 4), ("conformance.pytest_plugin", 4),
    ("conformance.test_adapter_conformance", 4), ("conformance.site", 4), ("conformance.readme", 4),
    ("conformance.records", 1), ("conformance.spec", 1), ("conformance.vectors", 1), ("conformance.tolerances", 1),
    ("conformance.errors", 1), ("conformance", 1),
)


def layer(module: str) -> int:
    for prefix, n in LAYER_OF_PREFIX:
        if module == prefix or module.startswith(prefix + "."):
            return n
    raise KeyError(module)


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "vectors/v1" in path.as_posix():
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = modules()


def _resolve(name: str) -> str | None:
    """The module of ours an imported name denotes (a module, or the package that holds the name)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes inside `if TYPE_CHECKING:` blocks: annotations, never run."""
    return {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for stmt in node.body for inner in ast.walk(stmt)}


def imports(module: str) -> set[str]:
    """Every module of ours that `module` imports when it runs (any statement, any depth of the file; an
    import under `if TYPE_CHECKING:` is for annotations only and is not counted)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text())
    annotations_only = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from package import submodule` imports the submodule; `from module import name`, the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_has_a_layer():
    assert {m: layer(m) for m in MODULES}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_run_downward(module):
    upward = sorted(t for t in GRAPH[module] if layer(t) > layer(module))
    assert not upward, f"{module} (layer {layer(module)}) imports {upward} from a higher layer"


def test_oracle_refimpl_and_rlspec_are_independent():
    """rlspec (the trainer-side recorder) runs in a framework's own environment: it imports none of ours."""
    bottom = ("oracle", "refimpl", "rlspec")
    for module, targets in GRAPH.items():
        root = module.split(".")[0]
        if root in bottom:
            others = set(bottom) - {root} | {"conformance"}
            assert not any(t.split(".")[0] in others for t in targets), (module, sorted(targets))


def test_the_package_faces_are_not_cut_through_by_lower_layers():
    """A lower layer never imports a higher layer's package __init__ either (runner discovers the frameworks)."""
    for module, targets in GRAPH.items():
        for t in targets:
            assert layer(t) <= layer(module), (module, t)


def test_no_import_circle():
    """No module reaches itself through the imports of others (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"
