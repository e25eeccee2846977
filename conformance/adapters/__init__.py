"""Adapters: how the suite calls an implementation.

An adapter is any object (or module) that exposes a subset of the core-API functions under their
spec names (`grpo_advantages`, `ppo_token_loss`, ...) plus `name`, `version`, `spec_version` and
`array_api`; every attribute the runner reads, with its default and effect, and what each function
is passed, is in one place: `conformance/spec/v1/api.md`, "Adapter protocol (v2)".
`rlspec new-adapter NAME` writes a skeleton with all of them.

The adapter converts between the spec's array conventions and its framework's; the checks never
do. A function the adapter lacks is reported as `not_implemented`, never as a pass.
"""

from conformance.adapters.loading import BUILTIN_ADAPTERS, DEFAULT_DTYPES, AdapterLoadError, load_adapter

__all__ = ["BUILTIN_ADAPTERS", "DEFAULT_DTYPES", "AdapterLoadError", "load_adapter"]
