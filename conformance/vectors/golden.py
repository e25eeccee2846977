"""Golden-vector files: the JSON encoding, the SHA-256 manifest and loading.

A vector file (`v1/<function>/<slug>.json`, format in INTERPRETING.md) holds the inputs of one
case in positional order, its keywords, and the oracle's float64 outputs (and, for quantities with
a gradient, a seeded `upstream` and the oracle's vector-Jacobian products). `check_vector` calls an
adapter through the same machinery as `conformance.runner.differential.run_case` and compares with the
stored expectation instead of a live oracle.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from conformance.records import cases
from conformance.records import BY_FUNCTION
from conformance.vectors import V1_ROOT

MANIFEST_NAME = "MANIFEST.sha256"
NONFINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class ManifestError(Exception):
    """The files under a vector root disagree with its manifest (the message names each file)."""


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


def encode_float(x: float) -> float | str:
    """A float as JSON: itself (repr round-trips exactly), or "nan" / "inf" / "-inf"."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def decode_float(x: float | int | str) -> float:
    if isinstance(x, str):
        if x not in NONFINITE:
            raise ValueError(f"golden: expected a number or one of {sorted(NONFINITE)}, got {x!r}")
        return NONFINITE[x]
    return float(x)


def encode_array(a: np.ndarray) -> dict[str, Any]:
    """`{"dtype", "shape", "data"}` with `data` the flat row-major elements."""
    a = np.asarray(a)
    flat = a.ravel(order="C")
    if a.dtype == np.bool_:
        data: list[Any] = [bool(x) for x in flat]
    elif a.dtype.kind in "iu":
        data = [int(x) for x in flat]
    elif a.dtype == np.float64:
        data = [encode_float(x) for x in flat]
    else:
        raise TypeError(f"golden: cannot store dtype {a.dtype} (float64, integer or bool only)")
    return {"dtype": a.dtype.name, "shape": [int(n) for n in a.shape], "data": data}


def decode_array(obj: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(obj["dtype"])
    shape = tuple(obj["shape"])
    if dtype.kind == "f":
        values: list[Any] = [decode_float(x) for x in obj["data"]]
    else:
        values = list(obj["data"])
    if len(values) != math.prod(shape):
        raise ValueError(f"golden: {len(values)} elements do not fill shape {list(shape)}")
    return np.array(values, dtype=dtype).reshape(shape)


def encode_value(value: Any) -> Any:
    """An input: an array (encoded) or a Python scalar (kept as is)."""
    if isinstance(value, np.ndarray):
        return encode_array(value)
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return encode_float(value)
    raise TypeError(f"golden: cannot store an input of type {type(value).__name__}")


def decode_value(obj: Any) -> Any:
    if isinstance(obj, dict):
        return decode_array(obj)
    if isinstance(obj, str) and obj in NONFINITE:
        return NONFINITE[obj]
    return obj


def encode_output(output: str, value: Any) -> Any:
    """`expected`: an array; a list of two arrays for a pair (gae); a float for a scalar."""
    if output == "scalar":
        return encode_float(float(value))
    if output == "pair":
        return [encode_array(np.asarray(v, dtype=np.float64)) for v in value]
    return encode_array(np.asarray(value, dtype=np.float64))


def decode_output(output: str, obj: Any) -> tuple[Any, ...]:
    """The stored outputs as a tuple (the shape `run_case` compares)."""
    if output == "scalar":
        return (decode_float(obj),)
    if output == "pair":
        return tuple(decode_array(o) for o in obj)
    return (decode_array(obj),)


def dumps(vector: dict[str, Any]) -> str:
    """The canonical text of a vector: keys sorted, one-space indent, lists of scalars on one line,
    floats as Python's repr (shortest round-trip), ASCII, a final newline."""
    return _dump(vector, 0) + "\n"


def _dump(obj: Any, level: int) -> str:
    pad = " " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{_scalar(str(k))}: {_dump(obj[k], level + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    if isinstance(obj, list):
        if all(not isinstance(x, (dict, list)) for x in obj):
            return "[" + ", ".join(_scalar(x) for x in obj) + "]"
        return "[\n" + ",\n".join(pad + _dump(x, level + 1) for x in obj) + "\n" + " " * level + "]"
    return _scalar(obj)


def _scalar(x: Any) -> str:
    if not (x is None or isinstance(x, (bool, int, float, str))):
        raise TypeError(f"golden: cannot serialise {type(x).__name__} {x!r}")
    return json.dumps(x, allow_nan=False, ensure_ascii=True)


# ---------------------------------------------------------------------------------------------
# Manifest
# ---------------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def vector_files(root: Path) -> list[str]:
    """Every `*.json` under `root`, as sorted root-relative POSIX paths."""
    return sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*.json"))


def read_manifest(root: Path) -> dict[str, str]:
    """`{relative path: sha256}` from `root/MANIFEST.sha256` (sha256sum format)."""
    path = Path(root) / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"{path}: manifest missing")
    entries: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name:
            raise ManifestError(f"{path}:{n}: expected '<sha256>  <path>', got {line!r}")
        if name in entries:
            raise ManifestError(f"{path}:{n}: {name} listed twice")
        entries[name] = digest
    return entries


@dataclass(frozen=True)
class ManifestProblem:
    kind: str  # "missing", "modified", "unlisted"
    path: str  # relative to the root

    def describe(self, root: Path) -> str:
        full = Path(root) / self.path
        return {
            "missing": f"{full}: listed in {MANIFEST_NAME} but missing",
            "modified": f"{full}: sha256 differs from {MANIFEST_NAME} (edited or corrupted)",
            "unlisted": f"{full}: not listed in {MANIFEST_NAME}",
        }[self.kind]


def manifest_problems(root: Path) -> list[ManifestProblem]:
    """Every listed file that is missing or whose hash differs, and every unlisted `*.json`.
    Raises ManifestError when the manifest itself is missing or malformed."""
    root = Path(root)
    entries = read_manifest(root)
    problems = []
    for name, digest in sorted(entries.items()):
        path = root / name
        if not path.is_file():
            problems.append(ManifestProblem("missing", name))
        elif sha256_file(path) != digest:
            problems.append(ManifestProblem("modified", name))
    problems += [ManifestProblem("unlisted", name) for name in vector_files(root) if name not in entries]
    return problems


def verify_manifest(root: Path = V1_ROOT) -> None:
    """Raise ManifestError naming every missing, modified or unlisted file under `root`."""
    problems = manifest_problems(root)
    if problems:
        raise ManifestError(
            f"golden vectors under {root} do not match {MANIFEST_NAME}:\n"
            + "\n".join("  " + p.describe(root) for p in problems)
        )


def manifest_text(root: Path) -> str:
    """The manifest of every `*.json` under `root` as it is now."""
    root = Path(root)
    return "".join(f"{sha256_file(root / name)}  {name}\n" for name in vector_files(root))


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_vector(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def load_vectors(root: Path = V1_ROOT, *, verify: bool = True) -> list[dict[str, Any]]:
    """Every vector under `root` in manifest order, after verifying the manifest."""
    if verify:
        verify_manifest(root)
    return [load_vector(Path(root) / name) for name in vector_files(root)]


def decode_case(vector: dict[str, Any]) -> cases.Case:
    """The vector's inputs as a `conformance.records.cases.Case` (arrays decoded, positional order)."""
    args = {name: decode_value(v) for name, v in zip(vector["input_names"], vector["inputs"])}
    return cases.Case(vector["function"], args, dict(vector["kwargs"]), seed=vector.get("seed"), note=vector["id"])


def decode_expected(vector: dict[str, Any]) -> tuple[Any, ...]:
    return decode_output(BY_FUNCTION[vector["function"]].output, vector["expected"])


def decode_upstream(vector: dict[str, Any]) -> Any:
    if "upstream" not in vector:
        return None
    value = decode_value(vector["upstream"])
    return float(value) if not isinstance(value, np.ndarray) else value


def decode_expected_grads(vector: dict[str, Any]) -> tuple[np.ndarray, ...]:
    record = BY_FUNCTION[vector["function"]]
    return tuple(decode_array(vector["expected_grad"][name]) for name in record.grad_args)


__all__ = [
    "MANIFEST_NAME",
    "ManifestError",
    "ManifestProblem",
    "decode_case",
    "decode_expected",
    "decode_expected_grads",
    "decode_upstream",
    "dumps",
    "encode_array",
    "encode_output",
    "encode_value",
    "load_vector",
    "load_vectors",
    "manifest_problems",
    "manifest_text",
    "read_manifest",
    "verify_manifest",
]


# ---------------------------------------------------------------------------------------------
# The vectors as input cases of the conformance run (`rlspec check`'s `golden` check)
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _published_cases(root: Path) -> tuple[dict[str, tuple[cases.Case, ...]], dict[str, tuple[str, ...]]]:
    """(the vectors under `root` whose SHA-256 matches the manifest, by function; the problems with
    the others, by function). Every file is checked against the manifest *before* it is read: an
    edited, missing or unlisted vector is never decoded or used, and only its function is affected.
    A missing or malformed manifest raises ManifestError (no vector can be trusted)."""
    problems = manifest_problems(root)
    bad = {p.path for p in problems}
    rejected: dict[str, list[str]] = {}
    for problem in problems:
        rejected.setdefault(problem.path.split("/")[0], []).append(problem.describe(root))
    by_function: dict[str, list[cases.Case]] = {}
    for name in vector_files(root):
        if name not in bad:
            vector = load_vector(Path(root) / name)
            by_function.setdefault(vector["function"], []).append(decode_case(vector))
    return ({k: tuple(v) for k, v in by_function.items()}, {k: tuple(v) for k, v in rejected.items()})


def cases_for(function: str) -> list[cases.Case]:
    """The published vectors of `function` as cases (hand-built edge cases: pad == eos, empty rows,
    all-equal and size-1 groups, clip boundaries, ...); loaded once per process. Raises
    ManifestError naming the files when a vector of `function` disagrees with the manifest (the
    conformance row becomes an error that says so; no tampered vector is used)."""
    good, rejected = _published_cases(V1_ROOT)
    if function in rejected:
        raise ManifestError(
            f"golden vectors of {function} do not match {MANIFEST_NAME} and were not used:\n"
            + "\n".join("  " + line for line in rejected[function])
        )
    return list(good.get(function, ()))
