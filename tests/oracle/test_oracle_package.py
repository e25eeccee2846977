"""The oracle package itself: docstrings, independence from torch (its signatures against the records:
tests/conformance/test_records.py)."""

import ast
import inspect
import pathlib

import oracle

ORACLE_DIR = pathlib.Path(oracle.__file__).parent


def test_every_public_function_has_a_spec_docstring():
    for name in oracle.__all__:
        obj = getattr(oracle, name)
        if callable(obj):
            doc = inspect.getdoc(obj) or ""
            assert "Spec: " in doc and "(v1)" in doc, name


def test_oracle_imports_numpy_only():
    allowed = {"numpy", "math", "numbers", "typing", "__future__", "oracle"}
    for path in ORACLE_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {roots - allowed}"
