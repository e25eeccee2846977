"""The findings of each framework as data: ``conformance/frameworks/<name>/findings.toml``.

A framework's findings file is the one source of what rlspec says it found there. ``docs/frameworks.md``,
the framework's README and the site are generated from it (`markdown`), and the tests check every entry:
its report rows exist, its citations name lines of the installed framework, and its reproduction, a script
in ``<name>/repro/`` that imports only the framework (never rlspec), prints what its docstring's
``Actual:`` block says when run in the framework's environment.

The file::

    framework = "ms-swift"          # the distribution's name, as a maintainer knows it
    version = "4.6.0"               # the version every citation was read at (the presets' VERSION)
    source_root = "swift"           # where the cited paths start, inside site-packages

    [[finding]]
    id = "gdpo-batch-of-one-nan"    # stable, unique in the file; the repro is repro/<id>.py
    kind = "bug"                    # one of KINDS
    title = "GDPO on a batch of one sequence is NaN"
    claim = "..."                   # what is wrong, with the numbers (Markdown)
    where = ["rl_core/advantage.py:93", "rl_core/advantage.py:75"]   # under source_root, at `version`
    config = "..."                  # the real configuration that reaches it (and what keeps others out)
    rows = ["gdpo_advantages@ms_swift"]   # report rows that show it (may be empty: then `tests` must pin it)
    tests = ["test_finding_gdpo_batch_of_one_sequence_is_nan"]   # rlspec tests in tests/frameworks/ pinning it
    upstream = "not reported"       # or an issue / pull-request URL
    fixed_in = ""                   # the release that fixed it, if any
    reclassified = ""               # when a re-examination changed its kind: "was bug: why"

    [[withdrawn]]                   # a claim published earlier and found false: kept, so readers can see why
    id = "..."
    claim = "..."
    why = "..."

A repro script's docstring holds ``Expected`` (what the spec gives, derived by hand or from the paper) and
``Actual:``, an indented block that is exactly the script's standard output at ``version``.
"""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HOMES = Path(__file__).resolve().parent
KINDS: dict[str, str] = {
    "bug": "the framework computes something other than it intends, on inputs its real use reaches",
    "convention": "a deliberate or documented choice that differs from the canonical definition (a preset or "
                  "variant, not a bug)",
    "precision": "the right quantity, computed less precisely than the input dtype allows",
    "packaging": "the framework cannot be installed or imported as declared",
}
FIELDS = ("id", "kind", "title", "claim", "where", "config", "rows", "tests", "upstream", "fixed_in", "reclassified")
REQUIRED = ("id", "kind", "title", "claim", "where", "config", "upstream")
CITATION = re.compile(r"^(?P<path>[\w./-]+\.(py|toml|txt|cfg|yaml|json)):(?P<first>\d+)(-(?P<last>\d+))?$")
RLSPEC_MODULES = ("conformance", "oracle", "refimpl", "rlspec", "tests")


class FindingsError(ValueError):
    """A findings file that does not follow the schema: names the file, the finding and the field."""


@dataclass(frozen=True)
class Finding:
    id: str
    kind: str
    title: str
    claim: str
    where: tuple[str, ...]
    config: str
    upstream: str
    rows: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    fixed_in: str = ""
    reclassified: str = ""


@dataclass(frozen=True)
class Withdrawn:
    id: str
    claim: str
    why: str


@dataclass(frozen=True)
class Findings:
    name: str  # the framework home's folder name
    framework: str
    version: str
    source_root: str
    findings: tuple[Finding, ...] = ()
    withdrawn: tuple[Withdrawn, ...] = ()
    path: Path = field(default=HOMES)

    def repro(self, finding: Finding) -> Path:
        """The no-rlspec reproduction script of `finding`."""
        return self.path.parent / "repro" / f"{finding.id}.py"


def _strings(where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FindingsError(f"{where}: must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def _finding(where: str, entry: dict[str, object]) -> Finding:
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise FindingsError(f"{where}: unknown field(s) {', '.join(unknown)}; the fields are {', '.join(FIELDS)}")
    missing = [k for k in REQUIRED if not entry.get(k)]
    if missing:
        raise FindingsError(f"{where}: missing {', '.join(missing)}")
    for key in ("id", "kind", "title", "claim", "config", "upstream", "fixed_in", "reclassified"):
        if key in entry and not isinstance(entry[key], str):
            raise FindingsError(f"{where}: {key} must be a string, got {entry[key]!r}")
    if entry["kind"] not in KINDS:
        raise FindingsError(f"{where}: kind {entry['kind']!r} is not one of {', '.join(KINDS)}")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", str(entry["id"])):
        raise FindingsError(f"{where}: id {entry['id']!r} must be lower-case words joined by '-'")
    cites = _strings(f"{where}.where", entry["where"])
    for cite in cites:
        if not CITATION.match(cite):
            raise FindingsError(f"{where}.where: {cite!r} is not 'path/to/file.py:LINE' or ':FIRST-LAST'")
    rows = _strings(f"{where}.rows", entry.get("rows", [])) if entry.get("rows") else ()
    tests = _strings(f"{where}.tests", entry.get("tests", [])) if entry.get("tests") else ()
    if not rows and not tests and entry["kind"] != "packaging":
        raise FindingsError(f"{where}: neither rows nor tests: a finding must be shown by a report row or pinned by a test")
    return Finding(id=str(entry["id"]), kind=str(entry["kind"]), title=str(entry["title"]).strip(),
                   claim=str(entry["claim"]).strip(), where=cites, config=str(entry["config"]).strip(),
                   upstream=str(entry["upstream"]).strip(), rows=rows, tests=tests,
                   fixed_in=str(entry.get("fixed_in", "")).strip(), reclassified=str(entry.get("reclassified", "")).strip())


def parse(path: Path) -> Findings:
    """The findings file at `path` (its folder names the framework home), validated (`FindingsError`)."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise FindingsError(f"{path}: not TOML: {exc}") from None
    for key in ("framework", "version", "source_root"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise FindingsError(f"{path}: top-level {key!r} (a non-empty string) is missing")
    unknown = sorted(set(data) - {"framework", "version", "source_root", "finding", "withdrawn"})
    if unknown:
        raise FindingsError(f"{path}: unknown top-level key(s) {', '.join(unknown)}")
    found = tuple(_finding(f"{path}: finding {e.get('id', i)!r}", e) for i, e in enumerate(data.get("finding", [])))
    ids = [f.id for f in found]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise FindingsError(f"{path}: duplicate finding id(s) {', '.join(dupes)}")
    withdrawn = []
    for i, e in enumerate(data.get("withdrawn", [])):
        if set(e) != {"id", "claim", "why"} or not all(isinstance(v, str) and v for v in e.values()):
            raise FindingsError(f"{path}: withdrawn {e.get('id', i)!r} needs exactly id, claim and why (strings)")
        withdrawn.append(Withdrawn(e["id"], e["claim"].strip(), e["why"].strip()))
    return Findings(name=path.parent.name, framework=data["framework"], version=data["version"],
                    source_root=data["source_root"], findings=found, withdrawn=tuple(withdrawn), path=path)


def load(name: str) -> Findings:
    """The findings of framework home `name` (`FileNotFoundError` when it has no findings file)."""
    return parse(HOMES / name / "findings.toml")


def homes_with_findings() -> tuple[str, ...]:
    """The framework homes that hold a ``findings.toml``, in name order."""
    return tuple(p.parent.name for p in sorted(HOMES.glob("*/findings.toml")))


def repro_docstring(path: Path) -> tuple[str, str]:
    """(Expected text, Actual block) of a repro script's docstring (`FindingsError` naming what is missing)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    expected = re.search(r"^Expected\b.*?(?=^Actual:)", doc, re.S | re.M)
    actual = re.search(r"^Actual:\n((?:[ \t]+.*\n?|\n)+)", doc, re.M)
    if not expected or not actual:
        raise FindingsError(f"{path}: the docstring needs an 'Expected ...' paragraph followed by an indented "
                            "'Actual:' block (the script's exact output)")
    return expected.group(0).strip(), textwrap.dedent(actual.group(1)).strip("\n")


def rlspec_imports(path: Path) -> list[str]:
    """The modules of rlspec's own code a repro script imports (it must import none)."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                 else ["."] if isinstance(node, ast.ImportFrom) else [])
        bad += [n for n in names if n == "." or n.split(".")[0] in RLSPEC_MODULES]
    return bad


def _finding_markdown(f: Finding, home: Findings, link: str) -> str:
    rows = ", ".join(f"`{r}`" for r in f.rows)
    lines = [f"**{f.title}** ({f.kind}{'; fixed in ' + f.fixed_in if f.fixed_in else ''}). {f.claim}",
             f"   - Where ({home.framework} {home.version}, under `{home.source_root}/`): "
             + ", ".join(f"`{c}`" for c in f.where),
             f"   - Reached with: {f.config}"]
    if rows:
        lines.append(f"   - Rows: {rows}")
    repro = home.repro(f)
    if repro.exists():
        lines.append(f"   - Reproduce without rlspec: [`repro/{f.id}.py`]({link}repro/{f.id}.py) "
                     "(expected and actual output in its docstring)")
    if f.tests:
        lines.append("   - Pinned by " + ", ".join(f"`{t}`" for t in f.tests)
                     + f" (`tests/frameworks/test_{home.name}_adapter.py`)")
    lines.append(f"   - Upstream: {f.upstream}")
    if f.reclassified:
        lines.append(f"   - Re-examined: {f.reclassified}")
    return "\n".join(lines)


def markdown(home: Findings, *, link: str = "", start: int = 1) -> str:
    """The numbered findings of one framework (then its withdrawn claims) as Markdown; `link` prefixes the
    repro links (relative to the page the text lands in)."""
    out = [f"{i}. {_finding_markdown(f, home, link)}" for i, f in enumerate(home.findings, start)]
    if home.withdrawn:
        out.append("\nWithdrawn (published earlier, found false on re-reading):\n")
        out += [f"- ~~{w.claim}~~ {w.why}" for w in home.withdrawn]
    return "\n".join(out)


__all__ = ["KINDS", "Finding", "Findings", "FindingsError", "Withdrawn", "homes_with_findings", "load", "markdown",
           "parse", "repro_docstring", "rlspec_imports"]
