"""`rlspec mutants`: run the conformance suite against every known-bug mutant and prove it is caught
and diagnosed, with no false positive on the refimpl.

For each mutant (`conformance.mutants`), only the rows of the functions it replaces are run (the
other functions are the refimpl's own, checked once in the refimpl run). A mutant is

- **caught** when one of those rows is not a pass (FAIL, ERROR, or a preset/variant match) or has
  cases that raised beside its verdict (`pass (ERROR)`);
- **diagnosed** when its own bug class is among the row's `consistent_with` (its outputs were
  reproduced by the mutant and its failure pattern fits, `conformance.runner.diagnosis`); the number of
  *other* classes listed is printed as the ambiguity;
- **as declared** when the (function, check) pairs that fail are exactly its `signature`. Which
  oracle-compared checks fail depends on the seeded inputs, so the declarations are pinned to the
  reference run (`--seed 0 --n-seeds 8`); a mismatch fails the command only there.

The refimpl is run in full first: every row must pass (no false positives). Exit status 1 when a
mutant is missed or undiagnosed, a signature differs in the reference run, or the refimpl fails.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.runner.options import RunOptions
from conformance.runner.report import cell
from conformance.runner.run import run as run_checks
from conformance.runner.run import select_records

REFERENCE_SEED = 0
REFERENCE_N_SEEDS = 8


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "mutants",
        help="run the suite against every known-bug mutant: caught, diagnosed, no false positives",
        description="Run the conformance suite against the refimpl with each known RL-trainer bug "
        "injected (conformance/mutants) and report, per mutant, whether it is caught and correctly "
        "diagnosed; the refimpl itself must pass every check.",
    )
    p.add_argument("--only", action="append", default=None, metavar="NAME_GLOB",
                   help="mutants whose name matches the glob (repeatable), e.g. 'kl_*'")
    p.add_argument("--seed", type=int, default=REFERENCE_SEED, help="base seed (default 0, the reference run)")
    p.add_argument("--n-seeds", type=int, default=REFERENCE_N_SEEDS, help="property cases per quantity (default 8)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per (quantity, adapter) row")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--no-refimpl", action="store_true", help="skip the refimpl false-positive runs")
    p.add_argument("--no-wiring", action="store_true",
                   help="skip the wiring mutants (training-step bugs planted in the refimpl trainer, each recorded "
                   "with `rlspec train --trace` and replayed)")
    p.add_argument("--no-functions", action="store_true", help="skip the function-level mutants")
    p.set_defaults(func=run)


@dataclass
class MutantResult:
    name: str
    bug_class: str
    catalogue: int
    functions: list[str]
    caught: bool
    first_failure: str | None
    diagnosed: bool
    other_classes: list[str] = field(default_factory=list)
    declared: list[list[str]] = field(default_factory=list)
    observed: list[list[str]] = field(default_factory=list)
    rows: dict[str, str] = field(default_factory=dict)
    verdict: str = ""
    seconds: float = 0.0

    @property
    def as_declared(self) -> bool:
        return sorted(map(tuple, self.declared)) == sorted(map(tuple, self.observed))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["as_declared"] = self.as_declared
        out["missing"] = sorted(set(map(tuple, self.declared)) - set(map(tuple, self.observed)))
        out["unexpected"] = sorted(set(map(tuple, self.observed)) - set(map(tuple, self.declared)))
        return out


@dataclass
class MutantsReport:
    seed: int
    n_seeds: int
    results: list[MutantResult]
    refimpl_false_positives: list[dict[str, Any]] | None
    seconds: float
    wiring: list[Any] = field(default_factory=list)  # conformance.mutants.wiring.judge.WiringResult
    wiring_false_positives: list[dict[str, Any]] | None = None

    @property
    def reference_run(self) -> bool:
        return self.seed == REFERENCE_SEED and self.n_seeds == REFERENCE_N_SEEDS

    @property
    def n_caught(self) -> int:
        return sum(r.caught for r in self.results)

    @property
    def n_diagnosed(self) -> int:
        return sum(r.caught and r.diagnosed for r in self.results)

    @property
    def ok(self) -> bool:
        if self.n_caught != len(self.results) or self.n_diagnosed != len(self.results):
            return False
        if self.reference_run and not all(r.as_declared for r in self.results):
            return False
        if not all(w.caught and w.named for w in self.wiring) or self.wiring_false_positives:
            return False
        return not self.refimpl_false_positives

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "mutants-v1",
            "seed": self.seed,
            "n_seeds": self.n_seeds,
            "mutants": [r.to_json() for r in self.results],
            "caught": self.n_caught,
            "diagnosed": self.n_diagnosed,
            "total": len(self.results),
            "refimpl_false_positives": self.refimpl_false_positives,
            "wiring": [w.to_json() for w in self.wiring],
            "wiring_false_positives": self.wiring_false_positives,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
        }


def select(mutants: list[Any], globs: list[str] | None) -> list[Any]:
    if not globs:
        return list(mutants)
    return [m for m in mutants if any(fnmatch.fnmatch(m.name, g) for g in globs)]


def evaluate(mutant: Any, *, seed: int, n_seeds: int, timeout: float) -> MutantResult:
    """Run the rows of the mutant's functions against it and judge caught / diagnosed / declared."""

    t0 = time.perf_counter()
    report = run_checks([mutant.adapter()], select_records(list(mutant.functions)),
                        RunOptions(seed=seed, n_seeds=n_seeds, timeout=timeout))
    own = mutant.label()
    caught_rows = [r for r in report.rows if r.status != "pass" or any(m["kind"] == "error" for m in r.failures)]
    observed = sorted([r.function, k] for r in report.rows for k, v in r.checks.items() if v in ("fail", "error"))
    first = None
    for r in caught_rows:
        kinds = [k for k, v in r.checks.items() if v in ("fail", "error")]
        first = f"{r.function}: {kinds[0] if kinds else r.status}"
        break
    diagnosed_rows = [r for r in caught_rows if own in r.consistent_with]
    others: list[str] = []
    for r in diagnosed_rows or caught_rows:
        others += [c for c in r.consistent_with if c != own and c not in others]
    return MutantResult(
        name=mutant.name,
        bug_class=mutant.bug_class,
        catalogue=mutant.catalogue,
        functions=list(mutant.functions),
        caught=bool(caught_rows),
        first_failure=first,
        diagnosed=bool(diagnosed_rows),
        other_classes=others,
        declared=sorted([fn, k] for fn, k in mutant.declared),
        observed=observed,
        rows={r.function: r.status for r in report.rows},
        verdict=", ".join(cell(r) for r in caught_rows) if caught_rows else "pass",
        seconds=time.perf_counter() - t0,
    )


def refimpl_false_positives(*, seed: int, n_seeds: int, timeout: float) -> list[dict[str, Any]]:
    """Every refimpl row that is not a pass, with its failing checks."""
    report = run_checks(["refimpl"], select_records(None), RunOptions(seed=seed, n_seeds=n_seeds, timeout=timeout))
    return [
        {"function": r.function, "status": r.status,
         "checks": [k for k, v in r.checks.items() if v in ("fail", "error")],
         "message": _first_finding(r.message)}
        for r in report.rows if r.status != "pass" or r.failures
    ]


def _first_finding(message: str) -> str:
    """The first line of a row message that says what is wrong (not the header or the inputs)."""
    for line in message.splitlines():
        if line and not line.startswith(("[", "inputs:", "Reproduce:")):
            return line
    return message.splitlines()[0] if message else ""


def run_mutants(*, only: list[str] | None = None, seed: int = REFERENCE_SEED, n_seeds: int = REFERENCE_N_SEEDS,
                timeout: float = 120.0, refimpl: bool = True, progress: bool = False, functions: bool = True,
                wiring: bool = True) -> MutantsReport:
    from conformance.mutants import all_mutants
    from conformance.mutants.wiring import discover as wiring_mutants
    from conformance.mutants.wiring.judge import false_positives, judge

    t0 = time.perf_counter()
    chosen = select(all_mutants(), only) if functions else []
    fps = refimpl_false_positives(seed=seed, n_seeds=n_seeds, timeout=timeout) if refimpl and chosen else None
    results = []
    for mutant in chosen:
        if progress:
            print(f"  {mutant.name} ...", file=sys.stderr, end="\r")
        results.append(evaluate(mutant, seed=seed, n_seeds=n_seeds, timeout=timeout))
    planted = select(wiring_mutants(), only) if wiring else []
    wired = []
    for mutant in planted:
        if progress:
            print(f"  {mutant.name} ...", file=sys.stderr, end="\r")
        wired.append(judge(mutant))
    wfps = false_positives(planted) if refimpl and planted else None
    return MutantsReport(seed, n_seeds, results, fps, time.perf_counter() - t0, wired, wfps)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render(report: MutantsReport) -> str:
    if not report.results:  # --no-functions
        return "\n".join(([render_wiring(report)] if report.wiring else []) + [f"{report.seconds:.1f}s"])
    header = ["mutant", "#", "verdict", "first failing check", "diagnosed", "signature", "bug class"]
    body = []
    for r in report.results:
        if r.diagnosed:
            diag = "yes" + (f" (+{len(r.other_classes)} other)" if r.other_classes else " (unique)")
        else:
            diag = "NO"
        if r.as_declared:
            sig = "as declared"
        else:
            missing = sorted(set(map(tuple, r.declared)) - set(map(tuple, r.observed)))
            extra = sorted(set(map(tuple, r.observed)) - set(map(tuple, r.declared)))
            sig = "DIFFERS" + (f" -{['/'.join(p) for p in missing]}" if missing else "") + (
                f" +{['/'.join(p) for p in extra]}" if extra else "")
        verdict = f"caught ({r.verdict})" if r.caught else "MISSED"
        body.append([r.name, str(r.catalogue), verdict, r.first_failure or "-", diag, sig,
                     _short(r.bug_class, 70)])
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    ambiguous = [r for r in report.results if r.diagnosed and r.other_classes]
    if ambiguous:
        lines.append("")
        lines.append("also consistent (same failure pattern and the same outputs on the failing inputs):")
        for r in ambiguous:
            lines.append(f"  {r.name}: " + "; ".join(r.other_classes))
    lines.append("")
    n = len(report.results)
    lines.append(f"caught {report.n_caught}/{n}, diagnosed {report.n_diagnosed}/{n}")
    if report.wiring:
        lines += ["", render_wiring(report)]
    if report.refimpl_false_positives is None:
        lines.append("refimpl: not run (--no-refimpl)")
    elif not report.refimpl_false_positives:
        lines.append("refimpl: every check passes (0 false positives)")
    else:
        lines.append(f"refimpl: {len(report.refimpl_false_positives)} FALSE POSITIVE(S):")
        for fp in report.refimpl_false_positives:
            lines.append(f"  {fp['function']}: {fp['status']} ({', '.join(fp['checks'])}) {fp['message']}")
    if not report.reference_run:
        lines.append(f"(seed {report.seed}, {report.n_seeds} seeds: signatures are pinned to the reference run "
                     f"--seed {REFERENCE_SEED} --n-seeds {REFERENCE_N_SEEDS}; differences are reported, not failed)")
    lines.append(f"{report.seconds:.1f}s")
    return "\n".join(lines)


def render_wiring(report: MutantsReport) -> str:
    """The wiring mutants' table: each one's replay link, whether it FAILs and names the bug."""
    header = ["wiring mutant", "link", "verdict", "named", "also failing", "bug class"]
    body = [[w.name, w.link, "caught" if w.caught else f"MISSED ({w.status})", "yes" if w.named else "NO",
             ", ".join(x.removeprefix("trace.") for x in w.other_failing) or "-", _short(w.bug_class, 70)]
            for w in report.wiring]
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    for w in report.wiring:
        if not w.named:
            lines.append(f"  {w.name}: {w.message}")
    n = len(report.wiring)
    lines += ["", f"wiring: caught {sum(w.caught for w in report.wiring)}/{n}, named {sum(w.named for w in report.wiring)}/{n} "
              "(rlspec replay of each mutant's rlspec train --trace)"]
    fps = report.wiring_false_positives
    if fps is None:
        lines.append("refimpl trainer: not run (--no-refimpl)")
    elif not fps:
        lines.append("refimpl trainer: every link passes in every mutant's configuration (0 false positives)")
    else:
        lines.append(f"refimpl trainer: {len(fps)} FALSE POSITIVE(S):")
        lines += [f"  {fp['link']} ({fp['setup']}): {fp['message']}" for fp in fps]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = run_mutants(only=args.only, seed=args.seed, n_seeds=args.n_seeds, timeout=args.timeout,
                         refimpl=not args.no_refimpl, progress=sys.stderr.isatty(), functions=not args.no_functions,
                         wiring=not args.no_wiring)
    if not report.results and not report.wiring:
        print(f"rlspec mutants: no mutant matches {args.only}")
        return 2
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0 if report.ok else 1
