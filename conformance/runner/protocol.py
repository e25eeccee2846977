"""The adapter boundary: what an adapter is (`Adapter`), and the one object through which the runner
reads it (`LoadedAdapter`).

An adapter is any object (an instance, a module, a `types.SimpleNamespace`) with `name`, `version`,
`spec_version` and `array_api`, plus any subset of the spec functions and the optional attributes of
api.md "Adapter protocol (v2)". `LoadedAdapter` reads every optional attribute once, with its documented
default (`OPTIONAL`), and gives the spec functions by name: nothing else in rlspec reads an attribute of an
adapter. An attribute set to None counts as absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from conformance.records import BY_FUNCTION
from conformance.records.tags import TAGS

# The input dtypes checked when an adapter declares no `dtypes`, by `array_api`.
DEFAULT_DTYPES: dict[str, tuple[str, ...]] = {
    "torch": ("float64", "float32", "bfloat16"),
    "numpy": ("float64", "float32"),
}
REQUIRED = ("name", "version", "spec_version", "array_api")

# The optional attributes the runner reads, with their defaults and effects (api.md lists the same table,
# with the function attributes `<function>` and `<function>_grad`).
OPTIONAL: dict[str, str] = {
    "dtypes": "the input dtypes checked, for every function or per function (default by array_api: DEFAULT_DTYPES)",
    "supports_grad": "False: values only, no gradient comparison and no invariant:detached; for every function "
                     "or per function (default True)",
    "accepts_variants": "True: every spec keyword is accepted, so each preset's keywords are checked too (default False)",
    "unsupported_kwargs": "function -> {keyword: values, or a predicate value -> bool} the adapter does not offer (default {})",
    "precision_notes": "function -> a reason printed with that function's precision findings (default {})",
    "domain": "function -> {input feature (conformance/records/tags.py TAGS): why the framework never receives it, "
              "with a source citation}: divergences on such cases are notes, not FAILs (default {})",
    "micro_batched_loss": "the agg.partition rows' contract (default absent)",
    "micro_batched_loss_grad": "NumPy adapters: the gradient of micro_batched_loss (default absent)",
    "extra_rows": "(seed) -> list[RowResult]: the framework's own rows (default absent)",
}


class AdapterError(Exception):
    """The object is not an adapter (the message names what it lacks)."""


@runtime_checkable
class Adapter(Protocol):
    """The required part of an adapter (every other attribute is optional: `OPTIONAL`)."""

    name: str
    version: str
    spec_version: str
    array_api: str


@dataclass(frozen=True, eq=False)
class LoadedAdapter:
    """An adapter with every optional attribute read once (its default where absent or None).

    `raw` is the user's object; `function(name)` / `grad_function(name)` give its spec functions (None
    when absent). Two LoadedAdapters of the same object are distinct objects; compare `raw`."""

    raw: Any
    name: str
    version: str
    spec_version: str
    array_api: str
    dtypes: tuple[str, ...]
    supports_grad: bool = True
    # per-function overrides of `dtypes` / `supports_grad` (the attribute given as a mapping)
    function_dtypes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    function_grad: Mapping[str, bool] = field(default_factory=dict)
    accepts_variants: bool = False
    unsupported_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    precision_notes: Mapping[str, str] = field(default_factory=dict)
    domain: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    micro_batched_loss: Callable[..., Any] | None = None
    micro_batched_loss_grad: Callable[..., Any] | None = None
    extra_rows: Callable[[int], list[Any]] | None = None

    @classmethod
    def of(cls, adapter: Any) -> LoadedAdapter:
        """`adapter` read through the protocol (an already loaded adapter is returned as it is). Raises
        AdapterError naming a missing required attribute or a bad `array_api`."""
        if isinstance(adapter, LoadedAdapter):
            return adapter
        missing = [a for a in REQUIRED if getattr(adapter, a, None) is None]
        if missing:
            raise AdapterError(f"adapter {adapter!r} lacks the required attribute {missing[0]!r}")
        api = adapter.array_api
        if api not in DEFAULT_DTYPES:
            raise AdapterError(f"adapter {adapter.name!r}: array_api must be 'torch' or 'numpy', got {api!r}")

        def optional(attribute: str, default: Any) -> Any:
            value = getattr(adapter, attribute, None)
            return default if value is None else value

        dtypes, function_dtypes = _per_function(adapter.name, "dtypes", optional("dtypes", DEFAULT_DTYPES[api]),
                                                DEFAULT_DTYPES[api], _dtype_tuple)
        grad, function_grad = _per_function(adapter.name, "supports_grad", optional("supports_grad", True), True, bool)
        return cls(
            raw=adapter,
            name=str(adapter.name),
            version=str(adapter.version),
            spec_version=str(adapter.spec_version),
            array_api=api,
            dtypes=dtypes,
            supports_grad=grad,
            function_dtypes=function_dtypes,
            function_grad=function_grad,
            accepts_variants=bool(optional("accepts_variants", False)),
            unsupported_kwargs=dict(optional("unsupported_kwargs", {})),
            precision_notes=dict(optional("precision_notes", {})),
            domain=_domain(adapter.name, optional("domain", {})),
            micro_batched_loss=optional("micro_batched_loss", None),
            micro_batched_loss_grad=optional("micro_batched_loss_grad", None),
            extra_rows=optional("extra_rows", None),
        )

    def dtypes_for(self, function: str) -> tuple[str, ...]:
        """The input dtypes checked for `function` (its own entry of a per-function `dtypes`, else the default)."""
        return self.function_dtypes.get(function, self.dtypes)

    def grad_for(self, function: str) -> bool:
        """Whether `function`'s gradients are compared (its own entry of a per-function `supports_grad`)."""
        return self.function_grad.get(function, self.supports_grad)

    def outside(self, function: str, tags: tuple[str, ...]) -> dict[str, str]:
        """The declared features of `function`'s domain exclusions among a case's `tags` (tag -> why)."""
        declared = self.domain.get(function, {})
        return {t: declared[t] for t in tags if t in declared}

    def function(self, name: str) -> Callable[..., Any] | None:
        """The adapter's spec function `name`, or None when it has none."""
        fn = getattr(self.raw, name, None)
        return fn if callable(fn) else None

    def grad_function(self, name: str) -> Callable[..., Any] | None:
        """A NumPy adapter's `<name>_grad`, or None."""
        return self.function(f"{name}_grad")

    def unsupported(self, function: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword values of `kwargs` that the adapter declares it does not offer for `function`: a
        declared entry is the values refused (a tuple, list or set) or a predicate (value -> True when
        refused), e.g. `{"kl_coef": lambda c: c != 0}`, `{"eps_high": lambda e: e > 0.2}`."""
        declared = self.unsupported_kwargs.get(function, {})
        return {k: v for k, v in kwargs.items() if k in declared and _refuses(declared[k], v)}


def _domain(name: str, value: Any) -> dict[str, dict[str, str]]:
    """`domain` checked: function -> {tag: reason}, every function a spec function, every tag one of
    conformance/records/tags.py's TAGS."""
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise AdapterError(f"adapter {name!r}: domain must map a function to {{input feature: reason}}, got {value!r}")
    _known_functions(name, "domain", value, ())
    for function, features in value.items():
        unknown = [t for t in features if t not in TAGS]
        if unknown:
            raise AdapterError(f"adapter {name!r}: domain[{function!r}] names unknown input feature(s) {unknown}; "
                               f"choose from {list(TAGS)}")
    return {str(f): {str(t): str(r) for t, r in features.items()} for f, features in value.items()}


def _refuses(declared: Any, value: Any) -> bool:
    if callable(declared):
        return bool(declared(value))
    return value in tuple(declared)


def _dtype_tuple(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(d, str) for d in value):
        raise TypeError(f"expected a sequence of dtype names, got {value!r}")
    return tuple(value)


def _per_function(name: str, attribute: str, value: Any, default: Any, convert: Callable[[Any], Any]) -> tuple[Any, dict[str, Any]]:
    """`value` as (the default for every function, per-function overrides): a plain value applies to every
    function; a mapping {function: value} sets the functions it names, its key "*" (optional) the rest."""
    try:
        if not isinstance(value, Mapping):
            return convert(value), {}
        rest = convert(value["*"]) if "*" in value else default
        overrides = {str(k): convert(v) for k, v in value.items() if k != "*"}
    except (TypeError, KeyError) as exc:
        raise AdapterError(f"adapter {name!r}: {attribute} must be a value or a mapping function -> value ({exc})") from None
    _known_functions(name, attribute, overrides, ("micro_batched_loss",))
    return rest, overrides


def _known_functions(name: str, attribute: str, mapping: Mapping[str, Any], extra: tuple[str, ...]) -> None:
    """A per-function mapping names only spec functions (a typo would silently apply to nothing)."""
    unknown = sorted(str(k) for k in mapping if k not in BY_FUNCTION and k not in extra)
    if unknown:
        raise AdapterError(f"adapter {name!r}: {attribute} names no spec function {unknown} (see `rlspec list`)")


__all__ = ["DEFAULT_DTYPES", "REQUIRED", "OPTIONAL", "AdapterError", "Adapter", "LoadedAdapter"]
