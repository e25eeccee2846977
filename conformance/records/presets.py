"""The framework presets of each quantity, found by discovery in the framework homes.

A *preset* names the keyword values with which a public trainer computes a spec quantity wherever its
default differs from the canonical definition (api.md). It uses only keywords of the quantity's record and
lists only those whose value differs from the canonical default. Presets are framework knowledge: each lives
in its framework's home, ``conformance/frameworks/<name>/presets.py``, which defines

- ``VERSION``: the version (a release, or a commit for a framework read from its source) the adapter is pinned
  to and its report was made with;
- ``READ`` (optional): every version the presets were read for, oldest first (default ``(VERSION,)``). A
  ``Preset`` without ``versions`` holds at ``VERSION``; one with ``versions`` holds at exactly those (a version
  other than ``VERSION`` holds only what was re-read there, the presets that name it);
- ``PRESETS``: a tuple of `Preset` (function, keywords, where it was read);
- ``SCOPE``: the functions read, or None for all of them (outside it a function is "not read", not
  "canonical");
- ``UNREAD`` (optional, with ``SCOPE = None``): the functions added to the spec after the home was read, "not
  read" until someone reads them;
- ``REQUIRED_DEFAULTS``: the framework's defaults of keywords that have no canonical default (documentation);
- ``NOT_EXPRESSIBLE``: the default behaviours no keyword expresses, one line each (documentation).

A home may hold only presets (a framework read from its source, without an adapter: ``open_instruct``,
``rlhf_book``, ``oat``). The records find the homes here by folder and import them by name: the records layer
imports nothing of the frameworks layer statically. Homes are taken in name order; a row that several
presets explain equally well is named after the framework's own preset first (`verdict.check_row`'s
``prefer``).

Presets per version: a preset is (framework, the versions it was read for) -> keywords + citation. The one that
holds at ``VERSION`` is named after the framework (``skyrl``); one that holds only at another read version is
named ``<framework>@<version>`` (``skyrl@main-fdfcb43``) and fingerprinted like any other. Running a version that
was not read (`unread_version_note`) is reported as such, and the row is fingerprinted against every version's
presets instead of being judged against ``VERSION``'s.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

FRAMEWORKS_DIR = Path(__file__).resolve().parent.parent / "frameworks"


@dataclass(frozen=True)
class Preset:
    """One function's preset in one framework: the keywords that differ from canonical, and where they
    were read (file:lines at the framework's `VERSION`, and what the code does there)."""

    function: str
    keywords: dict[str, Any]
    source: str
    versions: tuple[str, ...] = ()  # the read versions it holds at; () = the home's VERSION


@functools.lru_cache(maxsize=1)
def homes() -> dict[str, ModuleType]:
    """{framework: its presets module}, for every home with a ``presets.py``, in name order."""
    return {p.parent.name: importlib.import_module(f"conformance.frameworks.{p.parent.name}.presets")
            for p in sorted(FRAMEWORKS_DIR.glob("*/presets.py"))}


def read_versions(framework: str) -> tuple[str, ...]:
    """Every version `framework`'s presets were read for, oldest first."""
    home = homes()[framework]
    return tuple(getattr(home, "READ", (home.VERSION,)))


def presets(framework: str, version: str | None = None) -> dict[str, Preset]:
    """{function: Preset} of one framework at a read `version` (default: its ``VERSION``); KeyError naming the
    known frameworks, or the read versions, for an unknown one."""
    table = homes()
    if framework not in table:
        raise KeyError(f"no presets for {framework!r}; known: {', '.join(table)}")
    version = table[framework].VERSION if version is None else version
    read = read_versions(framework)
    if version not in read:
        raise KeyError(f"{framework}'s presets were not read for version {version!r}; read: {', '.join(read)}")
    for p in table[framework].PRESETS:
        if set(p.versions) - set(read):
            raise ValueError(f"{framework} preset of {p.function} names versions {p.versions} not all in READ {read}")
    pinned = version == table[framework].VERSION
    return {p.function: p for p in table[framework].PRESETS if version in p.versions or (pinned and not p.versions)}


def presets_of(function: str) -> dict[str, dict[str, Any]]:
    """{name: keywords} of every preset that names `function`, in framework name order: ``<framework>`` for the
    one holding at the framework's ``VERSION``, ``<framework>@<version>`` for one holding only at another read
    version (named after the newest such version)."""
    out: dict[str, dict[str, Any]] = {}
    for name, home in homes().items():
        pinned = presets(name).get(function)
        if pinned is not None:
            out[name] = pinned.keywords
        seen = [pinned.keywords] if pinned is not None else []
        for version in reversed(read_versions(name)):
            p = presets(name, version).get(function)
            if p is not None and p.keywords not in seen:
                out[f"{name}@{version}"] = p.keywords
                seen.append(p.keywords)
    return out


def unread_version_note(framework: str, running: str) -> str:
    """"" when `running` is a version `framework`'s presets were read for (or `framework` has no home), else the
    note a row of that framework carries: which versions were read, and that the verdict was fingerprinted
    against all of them rather than judged against the pinned one's."""
    if framework not in homes() or running in read_versions(framework):
        return ""
    return (f"presets read for {framework} {', '.join(read_versions(framework))}, running {running}: the verdict "
            "is fingerprinted against every read version's presets and the keyword grid, not judged against "
            f"{homes()[framework].VERSION}'s")


def preset_kwargs(framework: str, function: str, version: str | None = None) -> dict[str, Any]:
    """A copy of `framework`'s preset for `function` at a read `version` (default its ``VERSION``; {} when its
    default is canonical there)."""
    preset = presets(framework, version).get(function)
    return dict(preset.keywords) if preset is not None else {}


def was_read(framework: str, function: str) -> bool:
    """Whether `framework`'s presets were read for `function`: inside its ``SCOPE`` (None: every function) and not
    among its ``UNREAD`` (the functions added to the spec after a home read in full)."""
    home = homes()[framework]
    if function in getattr(home, "UNREAD", ()):
        return False
    return home.SCOPE is None or function in home.SCOPE


def version(framework: str) -> str:
    """The version `framework`'s presets were read for."""
    return homes()[framework].VERSION


__all__ = ["FRAMEWORKS_DIR", "Preset", "homes", "presets", "presets_of", "preset_kwargs", "read_versions",
           "unread_version_note", "version", "was_read"]
