"""Finding an adapter by built-in name, by `module:attribute` path, or by the `rlspec.adapters`
entry-point group."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from conformance.runner.discovery import framework_adapter_path, framework_names
from conformance.runner.protocol import AdapterError, LoadedAdapter

ENTRY_POINT_GROUP = "rlspec.adapters"

# name -> "module:factory"; factories are imported only when asked for, so a missing optional
# framework never breaks the others. The frameworks are the homes under conformance/frameworks/.
BUILTIN_ADAPTERS: dict[str, str] = {
    "oracle": "conformance.runner.builtin:oracle_adapter",
    "refimpl": "conformance.runner.builtin:refimpl_adapter",
    **{name: framework_adapter_path(name) for name in framework_names()},
}


class AdapterLoadError(Exception):
    """The adapter could not be found or imported (the message says which and why)."""


def _resolve(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise AdapterLoadError(f"adapter path {path!r}: expected 'package.module:attribute'")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m` would: an adapter beside
        sys.path.append(os.getcwd())  # the user's project imports without installing it
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AdapterLoadError(f"adapter {path!r}: cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a module that raises at import is a load error, said in one line
        raise AdapterLoadError(f"adapter {path!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):  # `module:obj.attr`, as entry points allow
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise AdapterLoadError(f"adapter {path!r}: {module_name!r} has no attribute {attr!r}") from exc
    return obj


def _instantiate(obj: Any) -> Any:
    """A class or a zero-argument factory is called; anything else is the adapter itself."""
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "name")):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - a factory that raises is a load error
            raise AdapterLoadError(f"adapter factory {getattr(obj, '__name__', obj)!r} raised {type(exc).__name__}: {exc}") from exc
    try:
        LoadedAdapter.of(obj)  # the required attributes and array_api, said once
    except AdapterError as exc:
        raise AdapterLoadError(str(exc)) from None
    return obj


def installed_entry_points() -> dict[str, Callable[[], Any]]:
    return {ep.name: ep.load for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_adapter(spec: str) -> Any:
    """Adapter from a built-in name, an entry-point name or a `module:attribute` path."""
    if spec in BUILTIN_ADAPTERS:
        return _instantiate(_resolve(BUILTIN_ADAPTERS[spec]))
    plugins = installed_entry_points()
    if spec in plugins:
        try:
            loaded = plugins[spec]()
        except Exception as exc:  # noqa: BLE001 - ImportError or anything the module raises at import
            raise AdapterLoadError(f"adapter {spec!r} (entry point): {type(exc).__name__}: {exc}") from exc
        return _instantiate(loaded)
    if ":" in spec:
        return _instantiate(_resolve(spec))
    known = sorted(set(BUILTIN_ADAPTERS) | set(plugins))
    raise AdapterLoadError(f"unknown adapter {spec!r}; known: {', '.join(known)} or 'module:attribute'")
