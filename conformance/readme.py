"""Tables of the README and of the spec's api.md that are generated from code, so they cannot drift.

`rlspec readme --write` rewrites every block between `<!-- BEGIN GENERATED: name -->` and
`<!-- END GENERATED: name -->` of every file in `DOCUMENTS`; `rlspec readme --check` (run by the
tests) fails when one is stale.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from conformance import spec
from conformance.records import FAMILIES, RECORDS, presets
from conformance.frameworks import findings
from conformance.records.record import literal
from conformance.runner.discovery import framework_names
from conformance.tolerances import DEFAULT, OVERRIDES

README = Path(__file__).resolve().parent.parent / "README.md"
API = spec.SPEC_DIR / "api.md"
DOCS = README.parent / "docs"
# the files whose generated blocks `rlspec readme` writes and checks
DOCUMENTS = (README, API, spec.SPEC_DIR / "README.md", *sorted(DOCS.glob("*.md")),
             *sorted(findings.HOMES.glob("*/README.md")))
BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
    re.S,
)


def spec_table() -> str:
    lines = ["| spec id | function | what it is | presets that deviate |", "|---|---|---|---|"]
    for q in RECORDS:
        presets = ", ".join(sorted(q.presets)) or "-"
        lines.append(f"| `{q.spec_id}` | `{q.function}` | {spec.description(q.spec_id)} | {presets} |")
    return "\n".join(lines)


def spec_index() -> str:
    """The spec README's index: one row per section (spec id), its file, its functions and its title."""
    sections: dict[str, list[str]] = {}
    for q in RECORDS:
        sections.setdefault(q.spec_id, []).append(f"`{q.function}`")
    lines = ["| spec id | file | function | title |", "|---|---|---|---|"]
    for spec_id, functions in sections.items():
        name = spec.section_path(spec_id).name
        shown = "agg.*" if name == "agg.md" else spec_id
        lines.append(f"| `{shown}` | [{name}]({name}) | {', '.join(functions)} | {spec.title(spec_id)} |")
    return "\n".join(lines)


def preset_table() -> str:
    """Every preset of every framework home, by function: its keywords, "canonical", or "not read"."""
    names = list(presets.homes())
    functions = [q.function for q in RECORDS if q.presets]
    lines = ["| function | " + " | ".join(f"`{n}` ({presets.version(n)})" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for f in dict.fromkeys(functions):
        cells = []
        for n in names:
            kw = presets.preset_kwargs(n, f)
            if kw:
                cells.append(", ".join(f"{k}={v!r}" for k, v in kw.items()))
            else:
                cells.append("canonical" if presets.was_read(n, f) else "not read")
        lines.append(f"| `{f}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tolerance_table() -> str:
    lines = ["| spec id | dtype | compared | rtol | atol | reason |", "|---|---|---|---|---|---|"]
    for dtype, tol in DEFAULT.items():
        lines.append(f"| (default) | {dtype} | value, grad | {tol.rtol:g} | {tol.atol:g} | {tol.reason} |")
    for (spec_id, dtype, what), tol in OVERRIDES.items():
        lines.append(f"| `{spec_id}` | {dtype} | {what} | {tol.rtol:g} | {tol.atol:g} | {tol.reason} |")
    return "\n".join(lines)


def functions_table() -> str:
    """api.md, "Functions": every record's signature (canonical defaults) and what it returns."""
    lines = ["| spec id | function | returns |", "|---|---|---|"]
    lines += [f"| `{q.spec_id}` | `{q.signature_text()}` | {q.returns} |" for q in RECORDS]
    return "\n".join(lines)


def adapter_keywords_table() -> str:
    """api.md, "Adapter protocol (v2)": the keywords a check passes each function of an adapter."""
    lines = ["| function | keywords passed | keywords never passed (left at canonical default) |", "|---|---|---|"]
    for q in RECORDS:
        passed = ", ".join(f"`{k}`" for k in q.question) or "-"
        if q.partition_keywords:
            passed += "; " + ", ".join(f"`{k}`" for k in q.partition_keywords) + " (invariant:partition)"
        never = ", ".join(f"`{k}={literal(v)}`" for k, v in q.canonical_keywords().items()) or "-"
        lines.append(f"| `{q.function}` | {passed} | {never} |")
    return "\n".join(lines)


def verdicts_table() -> str:
    """What a row of `rlspec check` can say, and which of it `--fail-on` can count."""
    from conformance.runner.report import DEFAULT_FAIL_ON, FINDING_DESCRIPTIONS
    from conformance.runner.rows import STATUSES

    lines = ["| kind | what it means | counts for the exit code by default |", "|---|---|---|"]
    for kind, what in {**STATUSES, **FINDING_DESCRIPTIONS}.items():
        lines.append(f"| `{kind}` | {what} | {'yes' if kind in DEFAULT_FAIL_ON else 'no'} |")
    return "\n".join(lines)


def command_table() -> str:
    from conformance.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    lines = ["| command | what it does |", "|---|---|"]
    for choice in sub._choices_actions:
        lines.append(f"| `rlspec {choice.dest}` | {choice.help} |")
    return "\n".join(lines)


def _framework_columns() -> list:
    """Every framework folder's committed report (conformance/reports/<name>.json) as a site column."""
    from conformance.site.matrix import framework_columns

    return framework_columns(README.parent / "conformance" / "reports", framework_names())


def frameworks_table() -> str:
    """One row per core-API quantity, one column per framework report in conformance/reports/."""
    columns: list[tuple[str, dict[str, dict]]] = [
        (c.header, {r["function"]: {**r, "framework": c.name} for r in c.rows if r["id"] == f"{r['function']}@{c.name}"})
        for c in _framework_columns() if c.status == "ok"
    ]
    lines = ["| spec id | function | " + " | ".join(c for c, _ in columns) + " |", "|---|---|" + "---|" * len(columns)]
    for q in RECORDS:
        cells = []
        for _, rows in columns:
            row = rows.get(q.function)
            if row is None:
                cells.append("-")
            else:
                cells.append(_framework_cell(row))
        lines.append(f"| `{q.spec_id}` | `{q.function}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _kwargs(kwargs: dict | None) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in (kwargs or {}).items())


def _framework_cell(row: dict) -> str:
    """A framework report row as a README cell: its own preset by name, another keyword set as a
    variant (naming the preset it equals, if any), then its precision and not-implemented marks."""
    status = row["status"]
    if status in ("preset", "variant"):
        presets = (row["matched_preset"] or "").split(", ")
        if row["framework"] in presets:
            text = f"preset {row['framework']}"
        else:  # keywords that happen to equal another framework's preset, or none
            same = f" (= preset {row['matched_preset']})" if row["matched_preset"] else ""
            text = "variant: " + _kwargs(row["matched_kwargs"]) + same
    else:
        text = {"pass": "pass", "fail": "**FAIL**", "error": "error", "not_implemented": "not implemented"}[status]
    marks = []
    raised = [m for m in row.get("failures") or [] if m["kind"] == "error"]
    if raised and status != "error":
        marks.append("ERROR on " + ", ".join(f"{m['n']} case(s)" for m in raised))
    if row.get("precision_findings"):
        marks.append("precision: " + ", ".join(f"{f['dtype']} meets {f['meets'].replace('_', ' ')}"
                                                for f in row["precision_findings"]))
    if row.get("not_implemented_cases"):
        marks.append("partial")
    if row.get("thin"):
        marks.append("thin")
    return text + (f" ({'; '.join(marks)})" if marks else "")


def spec_summary() -> str:
    """The quantities by family (the spec id's prefix), one line each."""
    families: dict[str, list[str]] = {}
    for q in RECORDS:
        families.setdefault(q.spec_id.split(".")[0], []).append(f"`{q.function}`")
    lines = [f"{len(RECORDS)} quantities, each with a spec section, a NumPy oracle (value and gradient), a "
             "PyTorch refimpl, golden vectors and framework presets:", "",
             "| family | quantities |", "|---|---|"]
    for prefix, functions in families.items():
        lines.append(f"| {FAMILIES.get(prefix, prefix)} (`{prefix}.*`) | {', '.join(dict.fromkeys(functions))} |")
    return "\n".join(lines)


def frameworks_summary() -> str:
    """Per framework report: version and the count of every row status (framework rows included)."""
    from conformance.site.matrix import status_counts

    statuses = ("pass", "preset", "variant", "fail", "error", "not_implemented")
    lines = ["| framework | version | rows | " + " | ".join(s.replace("_", " ") for s in statuses)
             + " | precision findings | ERROR beside the verdict | notes outside the domain |",
             "|---|---|---|" + "---|" * (len(statuses) + 3)]
    for c in _framework_columns():
        if c.status != "ok":
            lines.append(f"| {c.name} | not installed (`rlspec frameworks install {c.name}`) |" + " |" * (len(statuses) + 4))
            continue
        counts = status_counts(c.rows)
        findings = sum(len(r.get("precision_findings") or []) for r in c.rows)
        beside = sum(r["status"] != "error" and any(m["kind"] == "error" for m in r.get("failures") or []) for r in c.rows)
        cells = [f"**{counts[s]}**" if s in ("fail", "error") and counts[s] else str(counts[s]) for s in statuses]
        outside = sum(any(m["kind"] == "outside" for m in r.get("failures") or []) for r in c.rows)
        lines.append(f"| [{c.name}](conformance/reports/{c.name}.md) | {c.version} | {len(c.rows)} | " + " | ".join(cells)
                     + f" | {findings} | {f'**{beside}**' if beside else 0} | {outside} |")
    return "\n".join(lines)


def findings_all() -> str:
    """docs/frameworks.md, "What the runs found": every framework's findings file, numbered across frameworks."""
    out, n = [], 1
    for name in findings.homes_with_findings():
        home = findings.load(name)
        out.append(f"### {home.framework} {home.version} ([`{name}/findings.toml`](../conformance/frameworks/{name}/findings.toml))\n")
        out.append(findings.markdown(home, link=f"../conformance/frameworks/{name}/", start=n) + "\n")
        n += len(home.findings)
    return "\n".join(out).rstrip("\n")


def findings_summary() -> str:
    """docs/frameworks.md: the findings of each framework by kind, and how many were reported upstream."""
    kinds = tuple(findings.KINDS)
    lines = ["| framework | version | " + " | ".join(kinds) + " | withdrawn | reported upstream | fixed upstream |",
             "|---|---|" + "---|" * (len(kinds) + 3)]
    for name in findings.homes_with_findings():
        home = findings.load(name)
        count = [sum(f.kind == k for f in home.findings) for k in kinds]
        upstream = sum(f.upstream.startswith("http") for f in home.findings)
        fixed = sum(bool(f.fixed_in) for f in home.findings)
        lines.append(f"| {home.framework} | {home.version} | " + " | ".join(map(str, count))
                     + f" | {len(home.withdrawn)} | {upstream} | {fixed} |")
    return "\n".join(lines)


def findings_of(name: str) -> Callable[[], str]:
    """A framework README's "Findings" block: its own findings file."""
    return lambda: findings.markdown(findings.load(name))


def mutants_table() -> str:
    from conformance.mutants.base import mutants_table_markdown

    return mutants_table_markdown().rstrip("\n")


def wiring_mutants_table() -> str:
    """The wiring mutants (conformance/mutants/wiring/): each bug, the replay link that catches it, the name it gets."""
    from conformance.mutants.wiring import discover

    lines = ["| wiring mutant | bug | caught at | named as | setup | where it happened |", "|---|---|---|---|---|---|"]
    for m in discover():
        setup = ", ".join(f"{k}={v}" for k, v in m.config.items()) or "base"
        if m.world_size > 1:
            setup += f"; {m.world_size} ranks"
        if m.cp_size > 1:
            setup += f"; cp {m.cp_size}"
        lines.append(f"| `{m.name}` | {m.bug_class} | `{m.link}` | \"{m.identifies}\" | {setup} | {'; '.join(m.cites)} |")
    return "\n".join(lines)


def trace_tensors_table() -> str:
    """rlspec.trace's tensor names (per micro-batch, then per step)."""
    from rlspec.trace import MICRO_TENSORS, STEP_TENSORS

    lines = ["| tensor | recorded | what |", "|---|---|---|"]
    lines += [f"| `{n}` | per micro-batch | {d} |" for n, d in MICRO_TENSORS.items()]
    lines += [f"| `{n}` | per step | {d} |" for n, d in STEP_TENSORS.items()]
    return "\n".join(lines)


def bench_table(name: str) -> Callable[[], str]:
    """The `rlspec bench` tables of conformance/reports/bench_<name>.json (committed results)."""

    def table() -> str:
        from conformance.bench import bench_table_markdown

        path = README.parent / "conformance" / "reports" / f"bench_{name}.json"
        if not path.exists():
            return f"(not measured yet: `rlspec bench{' --device cuda' if name == 'gpu' else ''} --json {path.relative_to(README.parent)}`)"
        return bench_table_markdown(path).rstrip("\n")

    return table


def async_study_table(name: str) -> Callable[[], str]:
    """The table of a committed `rlspec async-study` result (conformance/reports/<name>.json)."""

    def table() -> str:
        import json

        from conformance.experiments.async_study import render_table

        path = README.parent / "conformance" / "reports" / f"{name}.json"
        if not path.exists():
            return f"(not run yet: `rlspec async-study --json {path.relative_to(README.parent)} ...`)"
        return render_table(json.loads(path.read_text()))

    return table


GENERATORS: dict[str, Callable[[], str]] = {
    "async-study": async_study_table("async_study"),
    "async-study-capped": async_study_table("async_study_capped"),
    "async-study-vllm": async_study_table("async_study_vllm"),
    "bench-cpu": bench_table("cpu"),
    "bench-gpu": bench_table("gpu"),
    "frameworks": frameworks_table,
    "frameworks-summary": frameworks_summary,
    "spec-summary": spec_summary,
    "mutants": mutants_table,
    "wiring-mutants": wiring_mutants_table,
    "trace-tensors": trace_tensors_table,
    "spec": spec_table,
    "spec-index": spec_index,
    "presets": preset_table,
    "tolerances": tolerance_table,
    "commands": command_table,
    "adapter-keywords": adapter_keywords_table,
    "functions": functions_table,
    "verdicts": verdicts_table,
    "findings": findings_all,
    "findings-summary": findings_summary,
    **{f"findings-{name}": findings_of(name) for name in findings.homes_with_findings()},
}


def render(text: str) -> str:
    def replace(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise KeyError(f"generated block {name!r} has no generator; known: {sorted(GENERATORS)}")
        return f"{m.group(1)}{GENERATORS[name]()}\n{m.group(4)}"

    return BLOCK.sub(replace, text)


def stale_blocks(text: str) -> list[str]:
    fresh = render(text)
    old = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
    new = {m.group("name"): m.group("body") for m in BLOCK.finditer(fresh)}
    return [name for name in old if old[name] != new[name]]
