"""Bad-input fuzzing of the whole public surface of `oracle` and `refimpl` (spec v1, api.md "Errors").

The surface is found by introspection (`surface.public_functions`: every callable of `__all__`), so
a new public function is covered automatically: it fails `test_every_public_function_is_covered`
until it has a base call (`surface.EXTRA_BASE` or a registry record), a role for each positional
argument (`ROLES`) and a rule for each keyword (`KEYWORDS`).

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
- group sizes 0, negative, not dividing B, float, bool, str; negative eps / eps_low / eps_high,
  temperature <= 0, dual_clip <= 1, clip <= 0, gamma or lam outside [0, 1], negative ddof,
  norm_length <= 0, negative global counts, chunk sizes < 1, NaN/inf/str/bool for every number;
- unknown mode / estimator / baseline / scale / form / bound / singleton names, or non-str names;
- an unknown keyword.

`test_every_bad_input_raises_the_documented_error` runs every (lib, function, argument, mutation)
case once; `test_bad_inputs_on_random_base_calls` draws (case, seed) with hypothesis so the same
mutations meet other shapes, dtypes and keyword settings. `N_CASES` is their number.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.robustness.surface import Call, base_call, one_sequence_per_row, outputs, public_functions, surface

# ----------------------------------------------------------------------------------------------
# roles of the positional arguments (by spec name) and kinds of the keywords
# ----------------------------------------------------------------------------------------------

ROLES: dict[str, str] = {
    "mask": "mask",
    "masks": "mask list",
    "input_ids": "ids",
    "logits": "logits",
    "logits_shard": "logits",
    "hidden": "hidden",
    "weight": "weight",
    "weight_shard": "weight",
    "rewards": "seq",
    "scores": "seq",
    "greedy_rewards": "seq",  # spec v1.1 adv.remax: one reward per prompt, [B / G]
    "advantages": "adv",
    "group_size": "group",
    "counts": "counts",
    "behav_version": "versions",
    "keep_mask": "keep",
    "is_weights": "weights",
    "lengths": "lengths",  # spec v1.1 reward.overlong: completion lengths, an integer [B]
    "truncated": "flags",  # spec v1.1 reward.shaping: bool (or exact 0/1) [B] beside the rewards
    **{n: "token" for n in ("logp", "old_logp", "ref_logp", "values", "old_values", "returns",
                            "token_rewards", "x", "token_loss", "rollout_logp", "prox_logp", "behav_logp",
                            "draws", "entropy", "sum_pi_squared")},
    # the controllers' scalar state (spec v1.1 ctrl.*): "real" a finite real, "count" an int >= 0,
    # "state" a real or +inf (a measurement not taken yet)
    **{n: "real" for n in ("kl_coef", "current_kl", "coef", "current_entropy")},
    "n_steps": "count",
    "last_entropy": "state",
    # "upstream" is "token" for a [B, T] output and "scalar" for a scalar one (decided per call)
}
SCALAR_ROLES = frozenset({"real", "count", "state"})
# Out-of-range values of scalar positional arguments (each a ValueError), on top of the generic ones.
SCALAR_ARG_VALUES: dict[str, tuple[Any, ...]] = {"kl_coef": (-0.1,), "n_steps": (-1,)}
# Array arguments that may be None (so the "None" mutation does not apply): (spec function, argument) ->
# role. kl_loss_term's old_logp is required only by its ratio forms (tested in tests/oracle/test_oracle_kl_loss.py).
OPTIONAL_ROLES: dict[tuple[str, str], str] = {("kl_loss_term", "old_logp"): "optional token",
                                               # spec v1.1 adv.optimal_token_baseline: rollout IS weights or None
                                               ("optimal_token_baseline_advantages", "is_weights"): "optional weights"}

CHOICES = ("estimator", "kl_estimator", "mode", "baseline", "scale", "singleton", "form", "bound",
           "level", "seq_stat", "statistic", "kl_of", "behav_mode", "method", "rejected", "divergence",
           "surrogate", "gradient", "beyond", "gap", "align", "tail_length")
REALS = ("temperature", "eps", "eps_low", "eps_high", "dual_clip", "clip", "log_ratio_clamp", "clamp",
         "gamma", "lam", "norm_length", "num_tokens", "num_seqs", "kl_coef", "lo", "hi", "behav_cap", "threshold",
         "tau_pos", "tau_neg", "delta_low", "delta_high", "ratio_cap", "beta", "k_pos", "lambda_pos", "k_neg",
         "lambda_neg", "w_min", "w_max", "weight_cap", "fraction", "cov_low", "cov_high", "coef",
         "rho", "entropy_coef", "target", "horizon", "delta", "coef_min", "coef_max",
         "factor", "truncated_scale", "truncated_value", "truncated_shift", "clip_low", "clip_high")
INTS = ("std_ddof", "chunk_size", "vocab_chunk_size", "memory_budget", "vocab_start", "dp_world_size", "version", "max_length",
        "buffer")
BOOLS = ("shift_mean", "reduce_hidden_grad", "batch_normalize", "weight_kl", "zero_tail")
LAYOUTS = ("cu_seqlens", "position_ids")  # packed rows: exactly one of the two
SEQUENCES = ("seqs_per_mask",)
POOLS = ("pooled_entropy",)  # a 1-D float array (or a list of floats) of a batch's values
WEIGHT_LISTS = ("reward_weights",)  # spec v1.1 adv.gdpo: None or a list/tuple of K finite numbers
# Keywords the fuzzer leaves alone, with the reason.
NOT_FUZZED = {
    "group": "a torch.distributed process group handle; None (or anything) means one process when "
             "torch.distributed is not initialised, and torch validates real groups",
}

# Out-of-range values per keyword (each a ValueError), on top of the generic NaN / inf / str / bool.
KEYWORD_VALUES: dict[str, tuple[Any, ...]] = {
    "temperature": (0.0, -1.0),
    "eps": (-1e-6,),
    "eps_low": (-0.1,),
    "eps_high": (-0.1,),
    "dual_clip": (1.0, 0.5),
    "clip": (0.0, -0.5),
    "log_ratio_clamp": (0.0, -1.0),
    "clamp": (0.0, -1.0),
    "gamma": (1.5, -0.1),
    "lam": (1.5, -0.1),
    "norm_length": (0.0, -4.0),
    "num_tokens": (-1.0,),
    "num_seqs": (-1.0,),
    "kl_coef": (),
    "std_ddof": (-1,),
    "chunk_size": (0, -1),
    "vocab_chunk_size": (0, -1),
    "memory_budget": (-1,),
    "vocab_start": (-1,),
    "dp_world_size": (0, -2),
    # lo / hi bound a ratio (> 0) in rollout_is_weights but a KL estimate (any real) in
    # rollout_rejection_mask: only the generic NaN / inf / str / bool mutations apply to both
    "lo": (),
    "hi": (),
    "behav_cap": (0.0, -1.0),
    "threshold": (),
    "version": (-1,),
    "tau_pos": (0.0, -1.0),
    "tau_neg": (0.0, -1.0),
    "delta_low": (-0.1,),
    "delta_high": (-0.1,),
    "ratio_cap": (0.0, -1.0),
    "beta": (0.0, -0.5),
    "k_pos": (-1.0,),
    "k_neg": (-1.0,),
    "lambda_pos": (0.0, -1.0),
    "lambda_neg": (0.0, -1.0),
    "w_min": (0.0, -1.0),
    "w_max": (0.0, -1.0),
    "max_length": (0, -1),
    "buffer": (-1, 10**9),  # 10**9 > every max_length drawn
    "factor": (-0.5,),
    # the truncation rule's values and the clip bounds are any real (clip_low > clip_high is clip_high's error)
    "truncated_scale": (),
    "truncated_value": (),
    "truncated_shift": (),
    "clip_low": (),
    "clip_high": (),
    "weight_cap": (0.0, -1.0),
    "fraction": (0.0, -0.1, 1.5),
    "cov_low": (),  # any real; cov_low >= cov_high is reported as cov_high's error
    "cov_high": (-1e9,),
    "coef": (-0.1,),
    "rho": (-0.1, 1.5),
    "entropy_coef": (),
    # an entropy target is any real, a KL target is > 0: only the generic mutations apply to both
    "target": (),
    "horizon": (0.0, -1.0),
    "delta": (-0.1,),
    "coef_min": (),  # coef_min > coef_max is reported as coef_max's error
    "coef_max": (-1e9,),
}
KEYWORDS = (set(CHOICES) | set(REALS) | set(INTS) | set(BOOLS) | set(LAYOUTS) | set(SEQUENCES) | set(POOLS)
            | set(WEIGHT_LISTS) | set(NOT_FUZZED))


def role(call: Call, name: str) -> str | None:
    if name == "upstream":
        return "scalar" if isinstance(call.value(name), float) else "token"
    base = call.function[: -len("_grad")] if call.function.endswith("_grad") else call.function
    return OPTIONAL_ROLES.get((base, name), ROLES.get(name))


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
ARRAY_ROLES = FLOAT_ROLES | {"mask", "ids", "versions", "keep", "lengths", "flags"}
BATCHED = frozenset({"token", "optional token", "adv", "seq", "logits", "hidden", "ids", "versions", "keep", "weights",
                     "optional weights", "lengths", "flags"})  # share B with the mask (or are the batch, without one)
TIMED = frozenset({"token", "optional token", "logits", "hidden", "ids", "keep", "weights", "optional weights"})  # share T with the mask
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
    _m("complex dtype", FLOAT_ROLES | {"mask", "ids", "versions", "keep", "lengths", "flags"}, TypeError, lambda c, n: _cast(c.value(n), "complex")),
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


def _keyword_mutations(name: str) -> list[tuple[str, Any, type[Exception]]]:
    if name in CHOICES:
        return [("unknown name", "no_such_name", ValueError), ("an int", 3, TypeError), ("None", None, TypeError)]
    if name in BOOLS:
        return [("a str", "yes", TypeError), ("an int", 1, TypeError)]
    if name in SEQUENCES:  # one count per mask
        return [("a str", "12", TypeError), ("a tensor", torch.ones(2), TypeError), ("too short", [1], ValueError),
                ("negative", [1, -1], ValueError), ("a float count", [1.5, 1], TypeError)]
    if name in POOLS:
        return [("NaN inside", [0.5, float("nan")], ValueError), ("+inf inside", [float("inf")], ValueError),
                ("2-D", [[0.5, 1.0]], ValueError), ("int values", [1, 2], TypeError), ("bool values", [True], TypeError),
                ("a str", "0.5", TypeError), ("a float", 0.5, TypeError)]
    if name in WEIGHT_LISTS:  # entries are checked before the length (K <= 3 in every base call)
        return [("a str", "1,2", TypeError), ("a float", 1.0, TypeError), ("a tensor", torch.ones(2), TypeError),
                ("NaN inside", [float("nan")], ValueError), ("+inf inside", [float("inf")], ValueError),
                ("a str inside", ["1"], TypeError), ("a bool inside", [True], TypeError),
                ("too long", [1.0] * 9, ValueError), ("empty", [], ValueError)]
    out: list[tuple[str, Any, type[Exception]]] = [(f"{v!r}", v, ValueError) for v in KEYWORD_VALUES[name]]
    if name in REALS:
        out += [("NaN", float("nan"), ValueError), ("+inf", float("inf"), ValueError), ("-inf", float("-inf"), ValueError)]
    else:
        out += [("a float", 1.5, TypeError)]
    return out + [("a str", "0.5", TypeError), ("a bool", True, TypeError), ("a list", [1.0], TypeError)]


def _scalar_arg_mutations(name: str, r: str) -> list[tuple[str, Any, type[Exception]]]:
    """Bad values of a scalar positional argument (a controller's state)."""
    out: list[tuple[str, Any, type[Exception]]] = [(f"{v!r}", v, ValueError) for v in SCALAR_ARG_VALUES.get(name, ())]
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
    for name in call.args:
        r = role(call, name)
        if r is None:
            raise LookupError(f"no role for argument {name!r} of {call.lib}.{call.function}: add it to ROLES")
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
            for label, value, exc in _scalar_arg_mutations(name, r):
                add(name, label, _replace(name, lambda c, v=value: v), exc)
        else:
            for m in ARRAY_MUTATIONS:
                if r in m.roles and call.lib in m.libs and (has_mask or not m.needs_mask):
                    add(name, m.name, _replace(name, lambda c, m=m, n=name: m.make(c, n)), m.expected)
    for name in call.keyword_names():
        if name not in KEYWORDS:
            raise LookupError(f"no rule for keyword {name!r} of {call.lib}.{call.function}: add it to KEYWORDS")
        if name in NOT_FUZZED:
            continue
        if name in LAYOUTS:
            other = LAYOUTS[1 - LAYOUTS.index(name)]
            for label, value, exc in _layout_mutations(call, name):
                add(name, label, _replace(name, lambda c, v=value: v, clear=other), exc)
            if name == "cu_seqlens":
                add(name, "both layouts", lambda c: c.with_value("cu_seqlens", torch.arange(0, c.mask.size + 1, c.mask.shape[1]))
                    .with_value("position_ids", torch.zeros(c.mask.shape, dtype=torch.long)), ValueError)
                if call.value("cu_seqlens") is not None:
                    add(name, "neither layout", _replace("cu_seqlens", lambda c: None, clear="position_ids"), ValueError)
            continue
        for label, value, exc in _keyword_mutations(name):
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
