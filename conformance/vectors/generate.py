"""Build golden vectors from the catalogue with the oracle; write the missing ones; check the tree.

`build_vector(entry)` is the only producer of vector files: it builds the catalogue case, calls the
oracle (and the oracle's `_grad` with a seeded upstream) on the float64 inputs and returns the JSON
object; `golden.dumps` gives its canonical text. Published files are never rewritten: `write`
adds the missing ones and refuses when a regenerated existing case differs; `check` regenerates
every case in memory and compares it with the files.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conformance import SPEC_VERSION
from conformance.records import BY_FUNCTION, GoldenCase, golden_catalogue
from conformance.records.cases import seeded_upstream
from conformance.tolerances import tolerance
from conformance.vectors import V1_ROOT, golden

# Bump only together with a new suite directory: a different generator output would make every
# published file differ from its regeneration.
GENERATOR_VERSION = 1
TOLERANCE_CLASS = "float64"


def upstream_seed(entry: GoldenCase, case_seed: int | None, case_upstream_seed: int) -> int:
    """The seed of the upstream gradient: the generator's own for random cases, else derived from
    the id (stable across runs and machines)."""
    if case_seed is not None:
        return case_upstream_seed
    return int.from_bytes(hashlib.sha256(entry.id.encode()).digest()[:4], "big") & 0x7FFFFFFF


def _plain(value: Any) -> Any:
    """Keyword values as plain JSON types (numpy scalars from the random generators included)."""
    if isinstance(value, np.generic):
        return value.item()
    return value


def build_vector(entry: GoldenCase) -> dict[str, Any]:
    """The vector of one catalogue entry, computed by the oracle in float64."""
    record = BY_FUNCTION[entry.function]
    case = entry.build()
    if case.function != entry.function:
        raise ValueError(f"{entry.id}: builder returned a case of {case.function!r}")
    for name, value in case.args.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.dtype != np.float64:
            raise TypeError(f"{entry.id}: {name}: golden inputs are float64, got {value.dtype}")
    kwargs = {k: _plain(v) for k, v in case.kwargs.items()}
    if json.loads(json.dumps(kwargs)) != kwargs:
        raise TypeError(f"{entry.id}: keywords {kwargs!r} do not survive JSON")

    inputs = [golden.encode_value(v) for v in case.args.values()]  # before the oracle runs
    args = [v.copy() if isinstance(v, np.ndarray) else v for v in case.args.values()]
    outputs = record.oracle(*args, **kwargs)
    vector: dict[str, Any] = {
        "id": entry.id,
        "function": entry.function,
        "spec_id": record.spec_id,
        "spec_version": SPEC_VERSION,
        "description": entry.description,
        "preset": entry.preset,
        "seed": case.seed,
        "kwargs": kwargs,
        "tolerance_class": TOLERANCE_CLASS,
        "generator_version": GENERATOR_VERSION,
        "input_names": list(case.args),
        "inputs": inputs,
        "expected": golden.encode_output(record.output, outputs),
    }
    if record.grad_args:
        expected = outputs if isinstance(outputs, tuple) else (outputs,)
        seed = upstream_seed(entry, case.seed, case.upstream_seed)
        upstream = seeded_upstream(record.output, expected, seed, TOLERANCE_CLASS)
        grads = record.oracle_grad(*args, upstream, **kwargs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(record.grad_args):
            raise ValueError(f"{entry.id}: the oracle returned {len(grads)} gradients")
        vector["upstream"] = golden.encode_value(upstream)
        vector["expected_grad"] = {
            name: golden.encode_array(np.asarray(g, dtype=np.float64))
            for name, g in zip(record.grad_args, grads)
        }
    if [golden.encode_value(v) for v in case.args.values()] != inputs:
        raise RuntimeError(f"{entry.id}: the oracle modified its inputs")
    return vector


def relative_path(entry: GoldenCase) -> str:
    return f"{entry.function}/{entry.slug}.json"


# ---------------------------------------------------------------------------------------------
# Comparing a regenerated vector with a published file
# ---------------------------------------------------------------------------------------------

OUTPUT_KEYS = ("expected", "expected_grad")


def differences(published: dict[str, Any], regenerated: dict[str, Any], exact: bool) -> list[str]:
    """How `regenerated` differs from `published`. Metadata, inputs and upstream must be identical;
    outputs must be bit-identical when `exact`, else within the float64 tolerance of the spec id
    (libm `exp`/`log` may differ in the last bit between machines)."""
    problems = []
    for key in sorted(set(published) | set(regenerated)):
        if key in OUTPUT_KEYS:
            continue
        if published.get(key, "<absent>") != regenerated.get(key, "<absent>"):
            problems.append(f"{key} differs")
    function = published.get("function")
    if function not in BY_FUNCTION or problems:
        return problems
    record = BY_FUNCTION[function]
    pairs = []
    if published.get("expected") != regenerated.get("expected"):
        pairs.append(("expected", "value", golden.decode_expected(published), golden.decode_expected(regenerated)))
    if published.get("expected_grad") != regenerated.get("expected_grad"):
        if set(published.get("expected_grad", {})) != set(regenerated.get("expected_grad", {})):
            return problems + ["expected_grad names differ"]
        pairs.append(("expected_grad", "grad", golden.decode_expected_grads(published),
                      golden.decode_expected_grads(regenerated)))
    for key, what, old, new in pairs:
        if exact:
            problems.append(f"{key} differs")
            continue
        tol = tolerance(record.spec_id, TOLERANCE_CLASS, what)
        for a, b in zip(old, new):
            a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            same_nonfinite = (np.isnan(a) & np.isnan(b)) | (a == b)
            close = np.abs(a - b) <= tol.atol + tol.rtol * np.abs(b)
            if a.shape != b.shape or not np.all(same_nonfinite | close):
                problems.append(f"{key} differs beyond the float64 tolerance")
                break
    return problems


# ---------------------------------------------------------------------------------------------
# Scanning a vector root against the catalogue
# ---------------------------------------------------------------------------------------------


@dataclass
class Scan:
    root: Path
    texts: dict[str, str] = field(default_factory=dict)  # relative path -> regenerated text
    missing: list[str] = field(default_factory=list)  # catalogue cases with no file
    differing: list[str] = field(default_factory=list)  # "path: what differs"
    close: list[str] = field(default_factory=list)  # outputs differ within tolerance only
    orphans: list[str] = field(default_factory=list)  # files that no catalogue case produces
    manifest: list[str] = field(default_factory=list)  # manifest problems (described)
    unlisted_ok: list[str] = field(default_factory=list)  # unlisted files equal to their case
    duplicates: list[str] = field(default_factory=list)  # catalogue ids used twice
    no_manifest: bool = False  # the root has no MANIFEST.sha256

    def refusals(self) -> list[str]:
        """What makes `write` refuse: anything wrong with a published file or the catalogue."""
        root = self.root
        return (
            [f"duplicate catalogue id {d}" for d in self.duplicates]
            + self.manifest
            + [f"{root / d}" for d in self.differing]
            + [f"{root / p}: published file that no catalogue case regenerates" for p in self.orphans]
        )

    def problems(self) -> list[str]:
        """What makes `check` fail: the refusals, a missing manifest, and unwritten cases."""
        root = self.root
        return (
            self.refusals()
            + ([f"{root / golden.MANIFEST_NAME}: manifest missing"] if self.no_manifest else [])
            + [f"{root / p}: catalogue case missing from disk (run `rlspec vectors --write`)" for p in self.missing]
        )


def scan(root: Path = V1_ROOT, *, exact: bool = False, catalogue: list[GoldenCase] | None = None) -> Scan:
    """Regenerate every catalogue case in memory and compare with the files under `root`."""
    root = Path(root)
    entries = golden_catalogue() if catalogue is None else catalogue
    result = Scan(root)
    seen: set[str] = set()
    for entry in entries:
        if entry.id in seen:
            result.duplicates.append(entry.id)
        seen.add(entry.id)

    unlisted: set[str] = set()
    if (root / golden.MANIFEST_NAME).exists():
        try:
            for problem in golden.manifest_problems(root):
                if problem.kind == "unlisted":
                    unlisted.add(problem.path)
                else:
                    result.manifest.append(problem.describe(root))
        except golden.ManifestError as exc:
            result.manifest.append(str(exc))
    else:
        result.no_manifest = True
        unlisted = set(golden.vector_files(root))

    for entry in entries:
        path = relative_path(entry)
        vector = build_vector(entry)
        text = golden.dumps(vector)
        result.texts[path] = text
        full = root / path
        if not full.is_file():
            result.missing.append(path)
            continue
        published_text = full.read_text()
        if published_text == text:
            if path in unlisted:
                result.unlisted_ok.append(path)
            continue
        diffs = differences(json.loads(published_text), vector, exact)
        if diffs:
            result.differing.append(f"{path}: " + "; ".join(diffs))
        else:
            result.close.append(path)
            if path in unlisted:
                result.unlisted_ok.append(path)
    expected_paths = {relative_path(e) for e in entries}
    result.orphans = [p for p in golden.vector_files(root) if p not in expected_paths]
    result.manifest += [
        f"{root / p}: not listed in {golden.MANIFEST_NAME}"
        for p in sorted(unlisted)
        if p not in result.unlisted_ok and p not in result.orphans
    ]
    return result


def check(root: Path = V1_ROOT, *, exact: bool = False, catalogue: list[GoldenCase] | None = None) -> Scan:
    """`rlspec vectors --check`: the scan; `scan.problems()` empty means the tree is good."""
    return scan(root, exact=exact, catalogue=catalogue)


def write(
    root: Path = V1_ROOT, *, exact: bool = False, catalogue: list[GoldenCase] | None = None
) -> tuple[Scan, list[str]]:
    """`rlspec vectors --write`: write the catalogue cases that have no file yet and rewrite the
    manifest. Never overwrites a file; refuses (writes nothing) when a published file differs from
    its regeneration, is modified or missing per the manifest, or has no catalogue case. Returns
    the scan and the relative paths written (empty on refusal)."""
    root = Path(root)
    result = scan(root, exact=exact, catalogue=catalogue)
    if result.refusals():
        return result, []
    written = []
    for path in result.missing:
        full = root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(full, result.texts[path])
        written.append(path)
    root.mkdir(parents=True, exist_ok=True)
    _atomic_write(root / golden.MANIFEST_NAME, golden.manifest_text(root))
    result.missing, result.no_manifest = [], False
    return result, written


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    os.replace(tmp, path)
