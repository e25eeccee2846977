"""Adding a quantity is its spec section, its oracle function, its refimpl function and its record (plus,
optionally, mutants and presets): docs/contributing.md. Two things hold that promise:

- no hand-kept list names a quantity: outside tests, docs, the vectors' JSON, the mutants and the framework
  homes, a quantity's name is written as a string (a key, an id, a comparison) or in an `__all__` only in its
  oracle module, its refimpl module and its record's module (the exceptions below say why each is no list);
- every generated place lists every quantity: the README and docs tables, api.md's function and keyword
  tables, the spec index, the `rlspec new-adapter` skeleton, the packages' `__all__`, the golden vectors,
  `rlspec list`; and every hand-written signature (a section's "## Function" block) is its record's.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import oracle
import refimpl
from conformance import readme, spec
from conformance.commands.new_adapter import adapter_source
from conformance.records import RECORDS, module_of, presets
from conformance.vectors import V1_ROOT

ROOT = Path(__file__).resolve().parents[2]
EXEMPT_DIRS = ("tests/", "docs/", "conformance/mutants/", "conformance/frameworks/")
# Strings that equal a quantity's name but list nothing (each says what it is).
NOT_LISTS = {
    ("conformance/bench/", "gae"): "the benchmark kind 'gae' (a key of bench results), the quantity it times",
    ("conformance/commands/bench.py", "gae"): "the benchmark kind 'gae'",
    ("conformance/trainer_verify.py", "gae"): "the name of the trainer check that verifies GAE",
    ("conformance/trace/", "gae"): "the value 'gae' of a trace's claimed `algorithm` (trace.md), not a list",
    ("conformance/trainer_trace.py", "gae"): "the trainer's claimed `algorithm` written into its trace",
    ("refimpl/trainer/", "policy_loss"): "a training metric named after the loss it logs",
    ("conformance/experiments/tiny_policy.py", "pg_token_loss"): "the functions the experiment runs (its own needs)",
    ("conformance/experiments/tiny_policy.py", "ppo_token_loss"): "the functions the experiment runs",
    ("conformance/experiments/tiny_policy.py", "aggregate"): "the functions the experiment runs",
}


def _source_files() -> list[str]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                               capture_output=True, text=True).stdout.split()
    return sorted(f for f in set(tracked + untracked) if not f.startswith(EXEMPT_DIRS) and (ROOT / f).exists())


def _named_strings(path: Path, names: set[str]) -> set[str]:
    """The quantity names a file writes as a string (docstrings are prose, not lists) or in `__all__`."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            for name in names:
                if text in (name, f"{name}_grad") or text.startswith((f"{name}/", f"{name}@")):
                    found.add(name)
    return found


def _home(record) -> set[str]:
    """The three files where a quantity's name may be listed."""
    return {f"oracle/{module_of(record)}.py", f"conformance/records/{module_of(record)}.py",
            refimpl.__dict__[record.function].__module__.replace(".", "/") + ".py"}


def _exempt(path: str, name: str) -> bool:
    return any(path.startswith(prefix) and name == n for (prefix, n) in NOT_LISTS)


def test_a_quantitys_name_is_listed_only_in_its_three_places():
    by_name = {r.function: r for r in RECORDS}
    misplaced = []
    for path in _source_files():
        for name in _named_strings(ROOT / path, set(by_name)):
            if path not in _home(by_name[name]) and not _exempt(path, name):
                misplaced.append(f"{path}: {name!r}")
    assert not misplaced, "a quantity named outside its oracle module, refimpl module and record:\n" + "\n".join(misplaced)


def test_the_exceptions_are_still_needed():
    """Every NOT_LISTS entry still matches a string (a stale exception would hide the next one)."""
    files = _source_files()
    for (prefix, name), why in NOT_LISTS.items():
        assert any(f.startswith(prefix) and name in _named_strings(ROOT / f, {name}) for f in files), (prefix, name, why)


# ---------------------------------------------------------------------------------------------
# Every generated place lists every quantity
# ---------------------------------------------------------------------------------------------

GENERATED_TABLES = {  # block name -> generator of `rlspec readme` that lists every quantity
    "spec-summary": readme.spec_summary,
    "spec": readme.spec_table,
    "adapter-keywords": readme.adapter_keywords_table,
    "frameworks": readme.frameworks_table,
    "functions": readme.functions_table,
    "spec-index": readme.spec_index,
}


@pytest.mark.parametrize("block", sorted(GENERATED_TABLES))
def test_every_quantity_is_in_each_generated_table(block):
    text = GENERATED_TABLES[block]()
    missing = [r.function for r in RECORDS if f"`{r.function}`" not in text and f"`{r.function}(" not in text]
    assert not missing, f"{block}: {missing}"


def test_the_functions_table_is_the_records_signatures_and_returns():
    text = readme.functions_table()
    for r in RECORDS:
        assert r.returns, f"{r.function}: the record has no `returns` text for api.md"
        assert f"| `{r.spec_id}` | `{r.signature_text()}` | {r.returns} |" in text, r.function


def _signature_in(section: str, function: str) -> str:
    """The signature of `function` in the section's "## Function" block, whitespace collapsed."""
    block = re.search(r"^## Functions?\n+```\n(.*?)```", section, re.S | re.M)
    assert block, "no '## Function' block"
    text = " ".join(block.group(1).split())
    start = text.find(f"{function}(")
    assert start >= 0, f"{function} is not in its section's Function block"
    depth = 0
    for end, char in enumerate(text[start:], start):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ")" and depth == 0:
            return text[start:end + 1].replace("( ", "(").replace(" )", ")")
    raise AssertionError(f"{function}: unbalanced parentheses in its Function block")


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.function)
def test_each_spec_section_writes_its_records_signature(record):
    """The hand-written "## Function" block of `<spec-id>.md` says what the record says (names, order,
    canonical defaults), so the page a reader opens cannot drift from what is checked."""
    assert _signature_in(spec.section(record.spec_id), record.function) == record.signature_text()


def test_the_presets_table_lists_every_function_with_a_preset():
    text = readme.preset_table()
    assert all(f"`{r.function}`" in text for r in RECORDS if r.presets)
    assert all(f"`{name}`" in text for name in presets.homes())


@pytest.mark.parametrize("api", ["torch", "numpy"])
def test_the_new_adapter_skeleton_has_a_stub_per_quantity(api):
    source = adapter_source("demo", "demo", api)
    missing = [r.function for r in RECORDS if f"def {r.function}(" not in source]
    assert not missing, missing


def test_every_quantity_is_exported_and_has_published_golden_vectors():
    for r in RECORDS:
        assert r.function in oracle.__all__ and r.function in refimpl.__all__, r.function
        assert any((V1_ROOT / r.function).glob("*.json")), f"no golden vectors under v1/{r.function}/"


def test_rlspec_list_names_every_quantity():
    out = subprocess.run([sys.executable, "-m", "conformance.cli", "list"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    missing = [r.function for r in RECORDS if r.function not in out.stdout]
    assert not missing, missing
