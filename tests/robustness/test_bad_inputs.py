"""Bad-input fuzzing of the whole public surface of `oracle` and `refimpl` (spec v1, api.md "Errors").

The surface is found by introspection (`surface.public_functions`: every callable of `__all__`), so
a new public function is covered automatically: it fails `test_every_public_function_is_covered`
until it has a base call (its record, or `surface.EXTRA_BASE`), a role for each positional argument
and a rule for each keyword. A spec function gets all three from its record (`conformance.records`):
each `Arg`'s role (and, for a scalar, its out-of-range values) and each `Keyword`'s kind and
out-of-range values, for the function and its `<name>_grad` variant. Only what no record knows is
written here, as the refimpl extras (`EXTENDS`, `EXTRA_ROLES`, `EXTRA_KEYWORDS`): the refimpl's own
functions and the keywords it adds to spec functions. `test_record_signature_matches_the_implementations`
proves that each record's signature is the oracle's (names, order, defaults) and that every argument
and keyword of it is fuzzed.

Each *mutation* breaks one argument of a valid base call in one way and states the exception the
spec requires (`TypeError` for a wrong dtype or Python type, `ValueError` for everything else); the
message must start with `<function>: <argument>:`. A mutation applies to an argument by its role
(the catalogue below), so mutations that cannot apply are never generated. Mutations:

- wrong ranks (+1, -1, 0-d), mismatched batch or length dims, empty vocabulary, wrong hidden size;
- wrong dtypes (int / bool / complex floats, float or bool token ids, complex masks, int logits),
  wrong Python types (str, None, a NumPy array where a tensor is required, a ragged list);
- masks: float values other than 0/1, NaN in a float mask, 2 in an int mask, `mask[:, 0]` set;
- NaN / +inf / -inf at a valid position (at the row t-1 that predicts a valid t for logits and
  hidden states), token ids out of [0, V) at a valid position;
- group sizes 0, negative, not dividing B, float, bool, str; every keyword's out-of-range values
  (`Keyword.invalid`: negative eps / eps_low / eps_high, temperature <= 0, dual_clip <= 1, clip <= 0,
  gamma or lam outside [0, 1], negative ddof, norm_length <= 0, negative global counts, ...), chunk
  sizes < 1, NaN/inf/str/bool for every number, None for every keyword that does not accept it;
- unknown mode / estimator / baseline / scale / form / bound / singleton names, or non-str names;
- an unknown keyword.

`test_every_bad_input_raises_the_documented_error` runs every (lib, function, argument, mutation)
case once; `test_bad_inputs_on_random_base_calls` draws (case, seed) with hypothesis so the same
mutations meet other shapes, dtypes and keyword settings. `N_CASES` is their number.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

import refimpl
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.records import BY_FUNCTION, RECORDS
from conformance.records.keywords import CLAMP, LOG_RATIO_CLAMP
from conformance.records.record import SCALAR_ROLES, Arg, Keyword, Quantity
from tests.robustness.surface import (
    EXTRA_BASE,
    Call,
    base_call,
    one_sequence_per_row,
    outputs,
    public_functions,
    spec_function,
    surface,
)

# ----------------------------------------------------------------------------------------------
# what the fuzzer knows of each parameter: the records' signatures, then the refimpl extras
# ----------------------------------------------------------------------------------------------

# The fuzzer's roles are the records' (`record.ROLES`: an `Arg`'s role) and a few of its own: an optional
# array gets its own role (None is valid, so the "None" mutation does not apply), "scalar" is the upstream
# of a scalar output, "mask list" and "counts" are refimpl extras (below). A controller's scalar state has
# the roles `record.SCALAR_ROLES` ("real", "count", "state").
OPTIONAL_ROLES: dict[str, str] = {"token": "optional token", "weights": "optional weights"}  # record role -> role

# --- the refimpl extras -----------------------------------------------------------------------------------
# What no record knows, because it belongs to no spec quantity: the refimpl's own functions (packed rows,
# vocabulary-parallel and distributed helpers, whose base calls are `surface.EXTRA_BASE`) and the keywords
# the refimpl adds to spec functions (chunk sizes, a memory budget). Nothing here is about a spec function's
# own arguments or keywords: those come from its record.

# The record each non-record refimpl function extends: its arguments and keywords that the record also has
# (same name, same meaning) follow the record's signature; the others are the extras below.
EXTENDS: dict[str, str | None] = {
    "token_logprobs_and_entropy_from_hidden": "token_logprobs_from_hidden",
    "global_counts": "aggregate",  # the global counts of aggregate's mask
    "step_counts": None,  # masks, group and seqs_per_mask: extras only
    "micro_batch_loss": "aggregate",
    "vocab_parallel_token_logprobs": "token_logprobs",
    "vocab_parallel_token_entropy": "token_entropy",
    "vocab_parallel_token_logprobs_from_hidden": "token_logprobs_from_hidden",
    "vocab_parallel_token_entropy_from_hidden": "token_entropy_from_hidden",
    "vocab_parallel_token_logprobs_and_entropy_from_hidden": "token_logprobs_from_hidden",
    "packed_token_logprobs": "token_logprobs",
    "packed_token_entropy": "token_entropy",
    "packed_aggregate": "aggregate",
    "packed_segments": "aggregate",  # the packed layout of a [B, T] mask
    "pack_boundary_mask": "aggregate",
}
# Roles of the arguments of non-record functions that their record lacks.
EXTRA_ROLES: dict[str, str] = {
    "logits_shard": "logits",  # this process's vocabulary columns
    "weight_shard": "weight",  # this process's rows of the LM head
    "masks": "mask list",  # step_counts: the [B, T] masks of a step's micro-batches
    "counts": "counts",  # micro_batch_loss: a StepCounts
}
# Rules of the keywords that refimpl functions take beyond their record: a `Keyword` of a record kind (its
# `invalid` values are out of range), or one of the fuzzer's own kinds: "layout" (packed rows: exactly one of
# cu_seqlens and position_ids), "counts per mask" (a sequence of ints >= 0) and "not fuzzed".
EXTRA_KEYWORDS: dict[str, Keyword | str] = {
    "chunk_size": Keyword("chunk_size", "int", optional=True, invalid=(0, -1), doc="rows per chunk"),
    "vocab_chunk_size": Keyword("vocab_chunk_size", "int", optional=True, invalid=(0, -1),
                                doc="vocabulary rows of the LM head per chunk"),
    "memory_budget": Keyword("memory_budget", "int", optional=True, invalid=(-1,), doc="bytes for the tiles"),
    "vocab_start": Keyword("vocab_start", "int", invalid=(-1,), doc="the first vocabulary row of this shard"),
    "dp_world_size": Keyword("dp_world_size", "int", optional=True, invalid=(0, -2), doc="data-parallel ranks"),
    "reduce_hidden_grad": Keyword("reduce_hidden_grad", "bool", choices=(False, True),
                                  doc="all-reduce the hidden states' gradient over the vocabulary group"),
    # refimpl.rlhf_token_rewards takes kl_penalty's clamps, which api.md's reward.rlhf signature lacks
    "log_ratio_clamp": LOG_RATIO_CLAMP,
    "clamp": CLAMP,
    "cu_seqlens": "layout",
    "position_ids": "layout",
    "seqs_per_mask": "counts per mask",
    # a torch.distributed process group handle: None (or anything) means one process when torch.distributed
    # is not initialised, and torch validates real groups
    "group": "not fuzzed",
}
LAYOUTS = ("cu_seqlens", "position_ids")


@dataclass(frozen=True)
class Signature:
    """What the fuzzer knows of one function's parameters: the role of each positional argument, the
    out-of-range values of its scalar ones (`Arg.invalid`) and the rule of each keyword (see EXTRA_KEYWORDS).
    A parameter missing here has no mutations, which `mutations_for` reports as a coverage failure."""

    roles: dict[str, str]
    invalid: dict[str, tuple[Any, ...]]
    keywords: dict[str, Keyword | str]


def _record_of(lib: str, function: str) -> Quantity | None:
    """The record whose signature `<lib>.<function>` follows: its own (a `<name>_grad` variant's is its spec
    function's), or the one a non-record refimpl function extends (None: it extends none)."""
    if lib == "refimpl" and function in EXTENDS:
        extended = EXTENDS[function]
        return None if extended is None else BY_FUNCTION[extended]
    if spec_function(function) not in BY_FUNCTION:
        raise LookupError(f"no signature for {lib}.{function}: it needs a record (a refimpl function outside "
                          "the spec: name the record it extends in EXTENDS)")
    return BY_FUNCTION[spec_function(function)]


def _role_of(arg: Arg) -> str:
    """The fuzzer's role of a record's argument (an optional array has a role of its own)."""
    if not arg.optional:
        return arg.role
    if arg.role not in OPTIONAL_ROLES:
        raise LookupError(f"argument {arg.name!r} is an optional {arg.role!r}: add the role to OPTIONAL_ROLES "
                          "and the mutations that apply to it")
    return OPTIONAL_ROLES[arg.role]


@functools.cache
def signature(lib: str, function: str) -> Signature:
    """The record's signature of `<lib>.<function>`, with the refimpl extras where the record has no such name
    (extra roles for non-record functions only: a spec function's arguments are exactly its record's)."""
    record = _record_of(lib, function)
    args = record.args if record is not None else ()
    roles = {a.name: _role_of(a) for a in args}
    keywords: dict[str, Keyword | str] = {k.name: k for k in record.keywords} if record is not None else {}
    if lib == "refimpl":
        keywords = {**EXTRA_KEYWORDS, **keywords}
        if function in EXTENDS:
            roles = {**EXTRA_ROLES, **roles}
    return Signature(roles, {a.name: a.invalid for a in args}, keywords)


def role(call: Call, name: str) -> str | None:
    """The role of argument `name` of `call` (None: unknown); the upstream of a `<name>_grad` variant has
    the output's shape, so it is "scalar" for a scalar output and "token" for a [B, T] one."""
    if name == "upstream" and call.function != spec_function(call.function):
        return "scalar" if isinstance(call.value(name), float) else "token"
    return signature(call.lib, call.function).roles.get(name)


# ----------------------------------------------------------------------------------------------
# array helpers that work on NumPy arrays and torch tensors alike
# ----------------------------------------------------------------------------------------------


def _torch(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _clone(x: Any) -> Any:
    return x.clone() if _torch(x) else np.array(x, copy=True)


def _cast(x: Any, kind: str) -> Any:
    if _torch(x):
        return x.to({"int": torch.int64, "bool": torch.bool, "complex": torch.complex64, "float": torch.float32}[kind])
    return x.astype({"int": np.int64, "bool": np.bool_, "complex": np.complex128, "float": np.float64}[kind])


def _numpy(x: torch.Tensor) -> np.ndarray:
    return (x.float() if x.dtype == torch.bfloat16 else x).numpy()


def _cat(a: Any, b: Any, axis: int) -> Any:
    return torch.cat([a, b], dim=axis) if _torch(a) else np.concatenate([a, b], axis=axis)


def _drop(x: Any, axis: int) -> Any:
    """One fewer element along `axis` (one more when there is only one)."""
    n = x.shape[axis]
    index = [slice(None)] * x.ndim
    if n >= 2:
        index[axis] = slice(0, n - 1)
        return x[tuple(index)]
    index[axis] = slice(0, 1)
    return _cat(x, x[tuple(index)], axis)


def _first_valid(call: Call) -> tuple[int, int]:
    b, t = np.argwhere(call.mask)[0]
    return int(b), int(t)


def _set(x: Any, index: tuple[int, ...], value: float) -> Any:
    y = _clone(x)
    y[index] = value
    return y


def _read_index(call: Call, name: str) -> tuple[int, ...]:
    """An element of argument `name` that the spec says is read (so must be finite)."""
    x = call.value(name)
    r = role(call, name)
    if r in ("seq",) or (r == "adv" and x.ndim == 1):
        return (0,)
    if r == "weight":
        return (0, 0)
    b, t = _first_valid(call)
    if r in ("logits", "hidden"):
        return (b, t - 1, 0)
    return (b, t)


def _version_index(call: Call, name: str) -> tuple[int, ...]:
    """The element of `behav_version` ([B] per row or [B, T] per token) of the first valid token."""
    b, t = _first_valid(call)
    return (b,) if call.value(name).ndim == 1 else (b, t)


def _vocab(call: Call) -> int:
    for name in ("logits", "logits_shard"):
        if name in call.args:
            return int(call.args[name].shape[-1])
    return int(call.args["weight" if "weight" in call.args else "weight_shard"].shape[0])


def _mask_with(call: Call, kind: str, value: float, name: str = "mask") -> Any:
    m = _cast(call.args[name], kind)
    return _set(m, _first_valid(call), value)


def _ragged(x: Any) -> list:
    rows = np.asarray(x).tolist()
    if not isinstance(rows, list) or not rows:
        return [[0.0], [0.0, 1.0]]
    return [rows[0], rows[0] + rows[0]] if isinstance(rows[0], list) else [[rows[0]], [rows[0], rows[0]]]


# ----------------------------------------------------------------------------------------------
# the catalogue
# ----------------------------------------------------------------------------------------------

FLOAT_ROLES = frozenset({"token", "optional token", "adv", "seq", "logits", "hidden", "weight", "weights",
                         "optional weights"})
ARRAY_ROLES = FLOAT_ROLES | {"mask", "ids", "versions", "keep", "lengths", "flags", "support"}
BATCHED = frozenset({"token", "optional token", "adv", "seq", "logits", "hidden", "ids", "versions", "keep", "weights",
                     "optional weights", "lengths", "flags", "support"})  # share B with the mask (or are the batch, without one)
TIMED = frozenset({"token", "optional token", "logits", "hidden", "ids", "keep", "weights", "optional weights",
                   "support"})  # share T with the mask
BOTH = ("oracle", "refimpl")


@dataclass(frozen=True)
class Mutation:
    name: str
    roles: frozenset[str]
    expected: type[Exception]
    make: Callable[[Call, str], Any]  # the bad value of the argument
    libs: tuple[str, ...] = BOTH
    needs_mask: bool = False  # only for functions that take a mask (a dim to mismatch)


def _m(name, roles, expected, make, libs=BOTH, needs_mask=False) -> Mutation:
    return Mutation(name, frozenset(roles), expected, make, libs, needs_mask)


ARRAY_MUTATIONS: list[Mutation] = [
    # dtypes and Python types
    _m("int dtype", FLOAT_ROLES, TypeError, lambda c, n: _cast(c.value(n), "int")),
    _m("bool dtype", FLOAT_ROLES | {"ids", "versions", "lengths"}, TypeError, lambda c, n: _cast(c.value(n), "bool")),
    _m("complex dtype", FLOAT_ROLES | {"mask", "ids", "versions", "keep", "lengths", "flags", "support"}, TypeError,
       lambda c, n: _cast(c.value(n), "complex")),
    _m("float dtype", {"ids", "versions", "lengths"}, TypeError, lambda c, n: _cast(c.value(n), "float")),
    _m("a str", ARRAY_ROLES, TypeError, lambda c, n: "not an array"),
    _m("None", ARRAY_ROLES - {"optional token", "optional weights"}, TypeError, lambda c, n: None),
    _m("a NumPy array for a tensor", ARRAY_ROLES, TypeError, lambda c, n: _numpy(c.value(n)), libs=("refimpl",)),
    _m("a nested list for a tensor", ARRAY_ROLES, TypeError, lambda c, n: c.value(n).tolist(), libs=("refimpl",)),
    _m("a ragged nested list", ARRAY_ROLES, ValueError, lambda c, n: _ragged(c.value(n)), libs=("oracle",)),
    # ranks and shapes
    _m("rank + 1", ARRAY_ROLES, ValueError, lambda c, n: c.value(n)[..., None]),
    _m("rank - 1", ARRAY_ROLES - {"adv", "seq", "versions", "lengths", "flags"}, ValueError, lambda c, n: c.value(n)[..., 0]),
    _m("0-d", ARRAY_ROLES, ValueError, lambda c, n: c.value(n).reshape(-1)[0:1].reshape(())),
    _m("batch mismatch", BATCHED, ValueError, lambda c, n: _drop(c.value(n), 0), needs_mask=True),
    _m("length mismatch", TIMED, ValueError, lambda c, n: _drop(c.value(n), 1), needs_mask=True),
    _m("length mismatch ([B, T] advantages)", {"adv"}, ValueError,
       lambda c, n: _drop(c.value(n)[:, None].expand(-1, c.mask.shape[1]) if _torch(c.value(n)) and c.value(n).ndim == 1
                          else (np.repeat(c.value(n)[:, None], c.mask.shape[1], 1) if c.value(n).ndim == 1 else c.value(n)), 1),
       needs_mask=True),
    _m("empty vocabulary", {"logits"}, ValueError, lambda c, n: c.value(n)[..., :0]),
    _m("empty vocabulary", {"weight"}, ValueError, lambda c, n: c.value(n)[:0]),
    _m("hidden size mismatch", {"weight"}, ValueError, lambda c, n: _drop(c.value(n), 1)),
    _m("hidden size 0", {"hidden"}, ValueError, lambda c, n: c.value(n)[..., :0]),
    _m("dtype differs from hidden", {"weight"}, TypeError,
       lambda c, n: c.value(n).to(torch.float16 if c.value(n).dtype != torch.float16 else torch.float32),
       libs=("refimpl",)),
    # values at read positions
    _m("NaN at a valid position", FLOAT_ROLES, ValueError, lambda c, n: _set(c.value(n), _read_index(c, n), float("nan"))),
    _m("+inf at a valid position", FLOAT_ROLES, ValueError, lambda c, n: _set(c.value(n), _read_index(c, n), float("inf"))),
    _m("-inf at a valid position", FLOAT_ROLES, ValueError, lambda c, n: _set(c.value(n), _read_index(c, n), float("-inf"))),
    _m("id = V at a valid position", {"ids"}, ValueError, lambda c, n: _set(c.value(n), _first_valid(c), _vocab(c))),
    _m("id = -1 at a valid position", {"ids"}, ValueError, lambda c, n: _set(c.value(n), _first_valid(c), -1)),
    _m("version -1 at a valid position", {"versions"}, ValueError, lambda c, n: _set(c.value(n), _version_index(c, n), -1)),
    _m("version beyond the current one", {"versions"}, ValueError,
       lambda c, n: _set(c.value(n), _version_index(c, n), c.kwargs["version"] + 1)),
    # spec v1.1 reward shaping: completion lengths [B] and truncation flags [B] (beside the rewards)
    _m("negative length", {"lengths"}, ValueError, lambda c, n: _set(c.value(n), (0,), -1)),
    _m("float flags with 0.5", {"flags"}, ValueError, lambda c, n: _set(_cast(c.value(n), "float"), (0,), 0.5)),
    _m("float flags with NaN", {"flags"}, ValueError, lambda c, n: _set(_cast(c.value(n), "float"), (0,), float("nan"))),
    _m("int flags with 2", {"flags"}, ValueError, lambda c, n: _set(_cast(c.value(n), "int"), (0,), 2)),
    _m("batch mismatch (with rewards)", {"flags"}, ValueError, lambda c, n: _drop(c.value(n), 0)),
    # masks
    _m("float mask with 0.5", {"mask", "keep"}, ValueError, lambda c, n: _mask_with(c, "float", 0.5, n)),
    _m("float mask with NaN", {"mask", "keep"}, ValueError, lambda c, n: _mask_with(c, "float", float("nan"), n)),
    _m("int mask with 2", {"mask", "keep"}, ValueError, lambda c, n: _mask_with(c, "int", 2, n)),
    _m("int mask with -1", {"mask", "keep"}, ValueError, lambda c, n: _mask_with(c, "int", -1, n)),
    _m("negative weight at a valid position", {"weights", "optional weights"}, ValueError,
       lambda c, n: _set(c.value(n), _first_valid(c), -0.5)),
    # the sets the tokens were drawn from: [B, T, V] like the logits, 0/1, never empty where read
    _m("float support with 0.5", {"support"}, ValueError, lambda c, n: _set(_cast(c.value(n), "float"), _first_valid(c) + (0,), 0.5)),
    _m("int support with 2", {"support"}, ValueError, lambda c, n: _set(_cast(c.value(n), "int"), _first_valid(c) + (0,), 2)),
    _m("empty support at a valid position", {"support"}, ValueError, lambda c, n: _set(c.value(n), _first_valid(c), False)),
    _m("vocabulary mismatch", {"support"}, ValueError, lambda c, n: _drop(c.value(n), 2)),
    _m("mask[:, 0] set", {"mask"}, ValueError, lambda c, n: _set(c.value(n), (0, 0), True)),
    _m("mask[:, 0] set (float mask)", {"mask"}, ValueError, lambda c, n: _set(_cast(c.value(n), "float"), (0, 0), 1.0)),
]

SCALAR_UPSTREAM: list[tuple[str, Any, type[Exception]]] = [
    ("NaN", float("nan"), ValueError),
    ("+inf", float("inf"), ValueError),
    ("a str", "1.0", TypeError),
    ("None", None, TypeError),
    ("an array", np.ones((2, 2)), TypeError),
]


def _group_mutations(call: Call) -> list[tuple[str, Any, type[Exception]]]:
    B = call.args.get("rewards", call.mask).shape[0]  # the mask's rows where there are no [B] rewards
    return [
        ("0", 0, ValueError),
        ("negative", -2, ValueError),
        ("not dividing B", B + 1, ValueError),
        ("a float", 2.0, TypeError),
        ("a bool", True, TypeError),
        ("a str", "2", TypeError),
        ("None", None, TypeError),
    ]


def _keyword_mutations(keyword: Keyword) -> list[tuple[str, Any, type[Exception]]]:
    """Bad values of a keyword: its out-of-range values (`Keyword.invalid`, each a ValueError), the generic
    bad values of its kind, and None where the keyword does not accept it (`Keyword.optional`): a wrong Python
    type. A required number (no canonical default) is not given None: an implementation may read it as the
    value left out (dro_token_loss: a ValueError, "no default beta"; kl_coef: a TypeError)."""
    out: list[tuple[str, Any, type[Exception]]] = [(f"{v!r}", v, ValueError) for v in keyword.invalid]
    if not keyword.optional and not (keyword.required and keyword.kind in ("real", "int")):
        out.append(("None", None, TypeError))
    if keyword.kind == "choice":
        return out + [("unknown name", "no_such_name", ValueError), ("an int", 3, TypeError)]
    if keyword.kind == "bool":
        return out + [("a str", "yes", TypeError), ("an int", 1, TypeError)]
    if keyword.kind == "pool":
        return out + [("NaN inside", [0.5, float("nan")], ValueError), ("+inf inside", [float("inf")], ValueError),
                      ("2-D", [[0.5, 1.0]], ValueError), ("int values", [1, 2], TypeError),
                      ("bool values", [True], TypeError), ("a str", "0.5", TypeError), ("a float", 0.5, TypeError)]
    if keyword.kind == "weights":  # entries are checked before the length (K <= 3 in every base call)
        return out + [("a str", "1,2", TypeError), ("a float", 1.0, TypeError), ("a tensor", torch.ones(2), TypeError),
                      ("NaN inside", [float("nan")], ValueError), ("+inf inside", [float("inf")], ValueError),
                      ("a str inside", ["1"], TypeError), ("a bool inside", [True], TypeError),
                      ("too long", [1.0] * 9, ValueError), ("empty", [], ValueError)]
    if keyword.kind == "real":
        out += [("NaN", float("nan"), ValueError), ("+inf", float("inf"), ValueError), ("-inf", float("-inf"), ValueError)]
    else:  # "int"
        out += [("a float", 1.5, TypeError)]
    return out + [("a str", "0.5", TypeError), ("a bool", True, TypeError), ("a list", [1.0], TypeError)]


def _counts_per_mask_mutations() -> list[tuple[str, Any, type[Exception]]]:
    """Bad `seqs_per_mask` of step_counts: one sequence count (an int >= 0) per mask."""
    return [("a str", "12", TypeError), ("a tensor", torch.ones(2), TypeError), ("too short", [1], ValueError),
            ("negative", [1, -1], ValueError), ("a float count", [1.5, 1], TypeError)]


def _scalar_arg_mutations(r: str, invalid: tuple[Any, ...]) -> list[tuple[str, Any, type[Exception]]]:
    """Bad values of a scalar positional argument (a controller's state) of role `r`: its out-of-range values
    (`Arg.invalid`), then the generic ones of its role."""
    out: list[tuple[str, Any, type[Exception]]] = [(f"{v!r}", v, ValueError) for v in invalid]
    if r == "count":
        out += [("a float", 1.5, TypeError)]
    else:  # "state" accepts +inf (nothing measured yet)
        out += [("NaN", float("nan"), ValueError), ("-inf", float("-inf"), ValueError)]
        out += [("+inf", float("inf"), ValueError)] if r == "real" else []
    return out + [("a str", "0.5", TypeError), ("a bool", True, TypeError), ("None", None, TypeError),
                  ("a list", [1.0], TypeError)]


def _layout_mutations(call: Call, name: str) -> list[tuple[str, Any, type[Exception]]]:
    """Bad packed layouts (the other layout keyword is set to None)."""
    B, T = call.mask.shape
    if name == "position_ids":
        good = torch.arange(T).expand(B, T)
        return [("a float tensor", good.float(), TypeError), ("a list", good.tolist(), TypeError),
                ("a str", "0,1,2", TypeError), ("wrong shape", good[:, :-1], ValueError),
                ("1-D", good[0], ValueError)]
    rows = torch.arange(0, B * T + 1, T)
    out = [("a float tensor", rows.float(), TypeError), ("a list", rows.tolist(), TypeError), ("a str", "0,4", TypeError),
           ("2-D", rows[None], ValueError), ("empty", rows[:0], ValueError),
           ("not starting at 0", torch.tensor([1, T]), ValueError),
           ("not increasing", torch.tensor([0, T, T]), ValueError),
           ("beyond B*T", torch.tensor([0, B * T + 1]), ValueError)]
    if B >= 2:
        out.append(("a sequence crossing a row", torch.tensor([0, T + 1]), ValueError))
    return out


@dataclass(frozen=True)
class BadCase:
    lib: str
    function: str
    argument: str
    mutation: str

    @property
    def id(self) -> str:
        return f"{self.lib}.{self.function}:{self.argument}:{self.mutation}"


Maker = Callable[[Call], Call]


def _replace(name: str, value_of: Callable[[Call], Any], *, clear: str | None = None) -> Maker:
    """The call with argument `name` replaced (and keyword `clear` set to None)."""

    def make(call: Call) -> Call:
        bad = call.with_value(name, value_of(call))
        return bad.with_value(clear, None) if clear else bad

    return make


def _mask_list_mutations(call: Call) -> list[tuple[str, str, Maker, type[Exception]]]:
    """(argument named, label, maker, exception) for a sequence of masks (`step_counts`)."""

    def element(i: int, value_of: Callable[[Any], Any]) -> Maker:
        return _replace("masks", lambda c: [value_of(m) if j == i else m for j, m in enumerate(c.args["masks"])])

    out = [("masks", "a tensor, not a sequence", _replace("masks", lambda c: c.args["masks"][0]), TypeError),
           ("masks", "a str", _replace("masks", lambda c: "masks"), TypeError)]
    for label, fn, exc in (("float mask with 0.5", lambda m: _set(m.float(), (0, 1), 0.5), ValueError),
                           ("mask[:, 0] set", lambda m: _set(m, (0, 0), True), ValueError),
                           ("1-D", lambda m: m[0], ValueError), ("a str", lambda m: "m", TypeError),
                           ("complex dtype", lambda m: m.to(torch.complex64), TypeError)):
        out.append(("masks[1]", f"masks[1]: {label}", element(1, fn), exc))
    return out


def mutations_for(call: Call) -> list[tuple[BadCase, Maker, type[Exception]]]:
    """Every (case, make the bad call, expected exception) that applies to `call`'s function."""
    out: list[tuple[BadCase, Maker, type[Exception]]] = []

    def add(arg: str, label: str, make: Maker, expected: type[Exception]) -> None:
        out.append((BadCase(call.lib, call.function, arg, label), make, expected))

    has_mask = call.mask is not None and "mask" in call.args
    sig = signature(call.lib, call.function)
    for name in call.args:
        r = role(call, name)
        if r is None:
            raise LookupError(f"no role for argument {name!r} of {call.lib}.{call.function}: a spec function's "
                              "arguments are its record's; a refimpl function outside the spec adds it to EXTRA_ROLES")
        if r == "group":
            for label, value, exc in _group_mutations(call):
                add(name, f"group_size {label}", _replace(name, lambda c, v=value: v), exc)
        elif r == "scalar":
            for label, value, exc in SCALAR_UPSTREAM:
                add(name, label, _replace(name, lambda c, v=value: v), exc)
        elif r == "counts":
            for label, value in (("a tuple", (3.0, 2.0)), ("None", None), ("a dict", {"num_tokens": 3.0})):
                add(name, label, _replace(name, lambda c, v=value: v), TypeError)
        elif r == "mask list":
            for arg, label, make, exc in _mask_list_mutations(call):
                add(arg, label, make, exc)
        elif r in SCALAR_ROLES:
            for label, value, exc in _scalar_arg_mutations(r, sig.invalid[name]):
                add(name, label, _replace(name, lambda c, v=value: v), exc)
        else:
            for m in ARRAY_MUTATIONS:
                if r in m.roles and call.lib in m.libs and (has_mask or not m.needs_mask):
                    add(name, m.name, _replace(name, lambda c, m=m, n=name: m.make(c, n)), m.expected)
    for name in call.keyword_names():
        rule = sig.keywords.get(name)
        if rule is None:
            raise LookupError(f"no rule for keyword {name!r} of {call.lib}.{call.function}: a spec keyword belongs "
                              "in the record; one the refimpl adds beyond the spec, in EXTRA_KEYWORDS")
        if rule == "not fuzzed":
            continue
        if rule == "layout":
            other = LAYOUTS[1 - LAYOUTS.index(name)]
            for label, value, exc in _layout_mutations(call, name):
                add(name, label, _replace(name, lambda c, v=value: v, clear=other), exc)
            if name == "cu_seqlens":
                add(name, "both layouts", lambda c: c.with_value("cu_seqlens", torch.arange(0, c.mask.size + 1, c.mask.shape[1]))
                    .with_value("position_ids", torch.zeros(c.mask.shape, dtype=torch.long)), ValueError)
                if call.value("cu_seqlens") is not None:
                    add(name, "neither layout", _replace("cu_seqlens", lambda c: None, clear="position_ids"), ValueError)
            continue
        values = _counts_per_mask_mutations() if rule == "counts per mask" else _keyword_mutations(rule)
        for label, value, exc in values:
            add(name, label, _replace(name, lambda c, v=value: v), exc)
    add("not_a_spec_keyword", "unknown keyword", _replace("not_a_spec_keyword", lambda c: 1), TypeError)
    return out


def all_cases(seed: int = 0) -> tuple[list[tuple[BadCase, Call, Maker, type[Exception]]], dict]:
    """Every bad-input case of the covered surface, and {(lib, function): why not covered}."""
    result, uncovered = [], {}
    for lib, name in surface():
        try:
            call = base_call(lib, name, seed)
            mutations = mutations_for(call)
        except LookupError as exc:  # reported by test_every_public_function_is_covered
            uncovered[(lib, name)] = str(exc)
            continue
        for case, make, exc in mutations:
            result.append((case, call, make, exc))
    return result, uncovered


CASES, UNCOVERED = all_cases(0)
COVERED = [f for f in surface() if f not in UNCOVERED]
N_CASES = len({c.id for c, *_ in CASES})  # distinct (lib, function, argument, mutation) cases


def check(case: BadCase, call: Call, make: Maker, expected: type[Exception]) -> str | None:
    """None when the mutated call raises `expected` with a message naming the argument, else why not."""
    bad = make(call)
    if case.argument == "not_a_spec_keyword":
        pattern = re.escape(case.argument)
    else:
        pattern = rf"^{re.escape(case.function)}: {re.escape(case.argument)}:"
    try:
        result = bad.invoke()
    except expected as exc:
        if not re.search(pattern, str(exc)):
            return f"{case.id}: {type(exc).__name__} with a message that does not start with the argument: {exc}"
        return None
    except Exception as exc:  # noqa: BLE001 - the wrong exception type is the finding
        return f"{case.id}: expected {expected.__name__}, got {type(exc).__name__}: {exc}"
    finite = all(np.all(np.isfinite(o)) for o in outputs(result) if o.dtype.kind == "f")
    return f"{case.id}: accepted silently (expected {expected.__name__}); outputs {'finite' if finite else 'NOT finite'}"


# ----------------------------------------------------------------------------------------------
# tests
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lib,name", surface(), ids=[f"{lib}.{name}" for lib, name in surface()])
def test_every_public_function_is_covered(lib, name):
    """A base call exists and passes, every argument has a role and every keyword a rule."""
    for seed in range(4):
        call = base_call(lib, name, seed)
        for o in outputs(call.invoke()):
            assert o.dtype.kind != "f" or np.all(np.isfinite(o)), f"{lib}.{name} base call (seed {seed}) is not finite"
        assert mutations_for(call)


def test_surface_is_complete():
    assert set(public_functions("oracle")) >= {
        "token_logprobs", "token_logprobs_grad", "grpo_advantages", "aggregate", "aggregate_grad", "policy_loss_grad",
    }
    assert set(public_functions("refimpl")) >= {"token_logprobs", "global_counts", "policy_loss"}
    assert N_CASES >= 1500, N_CASES


def test_refimpl_extras_are_exactly_what_no_record_knows():
    """The extras tables hold only refimpl knowledge no record has, and all of it: EXTENDS names the functions
    of surface.EXTRA_BASE (and records), and every extra role and keyword rule is a parameter some refimpl
    function takes beyond its record (none left over from a removed function)."""
    assert set(EXTENDS) == set(EXTRA_BASE), "EXTENDS and surface.EXTRA_BASE must name the same functions"
    assert not set(EXTENDS) & set(BY_FUNCTION), "a spec function's signature is its record's, not an extra"
    assert {r for r in EXTENDS.values() if r is not None} <= set(BY_FUNCTION)
    args, keywords = set(), set()
    for name in public_functions("refimpl"):
        record = _record_of("refimpl", name)
        params = inspect.signature(getattr(refimpl, name)).parameters.values()
        known = {*record.arg_names, *(k.name for k in record.keywords)} if record is not None else set()
        args |= {p.name for p in params if p.kind is not p.KEYWORD_ONLY and p.name not in known}
        keywords |= {p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in known}
    assert set(EXTRA_ROLES) == args
    assert set(EXTRA_KEYWORDS) == keywords


def _fits(keyword: Keyword, value: Any) -> bool:
    """Whether `value` is of the keyword's kind: one of its choices (of the same type: True is not 1), a
    number, a list of weights or a pool; None only where the keyword is optional."""
    if value is None:
        return keyword.optional
    if keyword.choices:
        return value in keyword.choices and type(value) is type(keyword.choices[0])
    types = {"real": (int, float), "int": (int,), "weights": (list, tuple), "pool": (list, tuple, np.ndarray)}
    return isinstance(value, types[keyword.kind]) and not isinstance(value, bool)


def _keyword_parameters(fn: Callable[..., Any]) -> dict[str, str]:
    """{name: repr(default)} of a function's keyword-only parameters (repr, so that 1, 1.0 and True differ;
    a keyword without a default has `record.REQUIRED`, inspect's own marker)."""
    return {p.name: repr(p.default) for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize("record", RECORDS, ids=[r.function for r in RECORDS])
def test_record_signature_matches_the_implementations(record):
    """The fuzzer takes every argument and keyword of a spec function from its record, so a record that drifted
    from the oracle (a keyword renamed, added, dropped or given another default) would fuzz the wrong
    parameters. The oracle's signature (and its `_grad` variant's, with the upstream) is the record's, in
    order; the refimpl's is the record's plus refimpl extras; every default is of its keyword's kind; and
    the fuzzer breaks every argument and keyword of the record in both libraries."""
    keywords = {k.name: repr(k.default) for k in record.keywords}
    grads = (record.oracle_grad,) if record.oracle_grad is not None else ()
    for fn, upstream in ((record.oracle, ()), *((g, ("upstream",)) for g in grads), (record.refimpl, ())):
        positional = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is not p.KEYWORD_ONLY]
        assert positional == [*record.arg_names, *upstream], fn.__qualname__
    for fn in (record.oracle, *grads):
        assert list(_keyword_parameters(fn).items()) == list(keywords.items()), fn.__qualname__
    refimpl_keywords = _keyword_parameters(record.refimpl)
    assert {k: refimpl_keywords.get(k, "missing") for k in keywords} == keywords
    assert set(refimpl_keywords) - set(keywords) <= set(EXTRA_KEYWORDS)
    wrong = [k.name for k in record.keywords if not (k.required or _fits(k, k.default))]
    assert not wrong, f"{record.function}: defaults not of their keyword's kind: {wrong}"
    for lib in BOTH:
        fuzzed = {c.argument for c, *_ in CASES if (c.lib, c.function) == (lib, record.function)}
        missing = (set(record.arg_names) | set(keywords)) - fuzzed
        assert not missing, f"{lib}.{record.function}: no mutation breaks {sorted(missing)}"


def test_every_bad_input_raises_the_documented_error(record_property):
    record_property("bad_input_cases", N_CASES)
    print(f"\n{N_CASES} distinct (lib, function, argument, mutation) bad-input cases")
    problems = [p for p in (check(*c) for c in CASES) if p is not None]
    assert not problems, f"{len(problems)} of {len(CASES)} bad inputs not rejected as documented:\n" + "\n".join(problems)


INDEX = {(lib, name): i for i, (lib, name) in enumerate(surface())}


@settings(max_examples=10 * settings.default.max_examples)  # one example costs about a millisecond
@given(data=st.data(), which=st.sampled_from(COVERED), seed=st.integers(0, 2**32 - 1))
def test_bad_inputs_on_random_base_calls(data, which, seed):
    """The same mutations on other shapes, dtypes and keyword settings (the case drawn by seed)."""
    lib, name = which
    call = base_call(lib, name, seed)
    options = mutations_for(call)
    case, make, expected = data.draw(st.sampled_from(options), label="mutation")
    problem = check(case, call, make, expected)
    assert problem is None, f"seed {seed}: {problem}"


# ----------------------------------------------------------------------------------------------
# degenerate but valid batches: empty batch, T = 1, every row masked
# ----------------------------------------------------------------------------------------------


def _degenerate(call: Call, kind: str) -> Call | None:
    """The call on an empty batch (B = 0), on T = 1 (so no valid token: mask[:, 0] is False) or with
    every row masked; None when the kind does not apply (T and masks need a mask argument)."""
    if kind != "empty batch" and call.mask is None:
        return None
    if kind == "empty batch" and not any(role(call, n) in BATCHED or role(call, n) == "mask" for n in call.args):
        return None  # no batch to empty: the controllers' scalar state
    args = dict(call.args)

    def transform(r: str | None, value: Any) -> Any:
        if kind == "empty batch" and (r in BATCHED or r == "mask"):
            return value[:0]
        if kind == "T = 1" and (r in TIMED or r == "mask" or (r in ("adv", "versions") and value.ndim == 2)):
            return value[:, :1]
        if kind == "every row masked" and r == "mask":
            return value & False
        return value

    for name, value in call.args.items():
        r = role(call, name)
        args[name] = [transform("mask", m) for m in value] if r == "mask list" else transform(r, value)
    kwargs = dict(call.kwargs)
    if kwargs.get("cu_seqlens") is not None:  # the packed layout of the new shape: one sequence per row
        kwargs["cu_seqlens"] = torch.from_numpy(one_sequence_per_row(np.asarray(transform("mask", call.mask))))
    return Call(call.lib, call.function, args, kwargs, call.mask, dict(call.meta))


DEGENERATE = ("empty batch", "T = 1", "every row masked")
COUNTS = ("global_counts", "step_counts")


@pytest.mark.parametrize("kind", DEGENERATE)
def test_degenerate_batches_give_zeros_not_nan(kind):
    """Empty batches, T = 1 and all-masked batches are valid input: every float output (values and
    gradients) is exactly 0 (or empty), never NaN, and no exception is raised."""
    problems = []
    for lib, name in surface():
        for seed in range(3):
            call = _degenerate(base_call(lib, name, seed), kind)
            if call is None:
                continue
            try:
                result = outputs(call.invoke())
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{lib}.{name} (seed {seed}): {type(exc).__name__}: {exc}")
                continue
            if name in COUNTS:  # (num_tokens, num_seqs): no token, and every row still counts as a sequence
                result = result[:1]
            for o in result:
                if o.dtype.kind == "f" and not np.all(o == 0):
                    problems.append(f"{lib}.{name} (seed {seed}): expected zeros, got {o.ravel()[:6]}")
    assert not problems, "\n".join(problems)
