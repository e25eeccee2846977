"""Adapters that take their process down (tests/conformance/test_isolation.py): each crashes in one
function and is the refimpl everywhere else. Loaded by `module:attribute` path, like a third-party
adapter, so `rlspec check` can re-load them in its worker process."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import time
import types

import refimpl


def _base(name: str, **functions: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, version="0.0-test", spec_version="v1", array_api="torch", **functions)


def _exits(*args, **kwargs):
    os._exit(3)  # no exception, no cleanup: what a native library's abort() or exit() looks like


def _segfaults(*args, **kwargs):
    ctypes.string_at(0)  # reads address 0: SIGSEGV, as a broken native kernel does


def _hangs(*args, **kwargs):
    time.sleep(3600)


def crashes_three_ways() -> types.SimpleNamespace:
    """grpo_advantages exits with code 3, rloo_advantages segfaults, reinforce_advantages hangs;
    token_logprobs and whiten are the refimpl's (they pass)."""
    return _base("crashes", grpo_advantages=_exits, rloo_advantages=_segfaults, reinforce_advantages=_hangs,
                 token_logprobs=refimpl.token_logprobs, whiten=refimpl.whiten)


def hangs() -> types.SimpleNamespace:
    """reinforce_advantages hangs; grpo_advantages is the refimpl's."""
    return _base("hangs", reinforce_advantages=_hangs, grpo_advantages=refimpl.grpo_advantages)


def parent_only() -> types.SimpleNamespace:
    """Loads in the `rlspec check` process but not in a worker it starts (as a module that needs the
    parent's state would)."""
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("needs the state of the process that started the run\nsecond line")
    return _base("parent-only", grpo_advantages=refimpl.grpo_advantages)
