"""The presets of the framework homes (`conformance/frameworks/<name>/presets.py`), found by discovery: each
names a record's function, uses only that record's keywords with values other than the canonical defaults,
cites where it was read, and is accepted by the oracle; every home says the version it was read for."""

from __future__ import annotations

import pytest

from conformance.records import BY_FUNCTION, presets
from conformance.runner.discovery import framework_names

HOMES = presets.homes()


def test_every_framework_with_an_adapter_has_a_presets_home():
    assert set(framework_names()) <= set(HOMES)
    assert {"open_instruct", "rlhf_book", "oat"} <= set(HOMES) - set(framework_names())  # read from source only


@pytest.mark.parametrize("framework", sorted(HOMES))
def test_a_home_states_its_version_scope_and_documentation(framework):
    home = HOMES[framework]
    assert isinstance(home.VERSION, str) and home.VERSION
    assert home.SCOPE is None or all(f in BY_FUNCTION for f in home.SCOPE)
    for table in (home.REQUIRED_DEFAULTS, home.NOT_EXPRESSIBLE):
        assert all(f in BY_FUNCTION for f in table), framework


@pytest.mark.parametrize("framework", sorted(HOMES))
def test_every_preset_is_a_keyword_set_of_its_record_with_a_citation(framework):
    seen = set()
    for preset in HOMES[framework].PRESETS:
        assert preset.function in BY_FUNCTION, preset
        for version in preset.versions or (HOMES[framework].VERSION,):
            assert (preset.function, version) not in seen, f"{framework}: two presets for {preset.function} at {version}"
            seen.add((preset.function, version))
        assert set(preset.versions) <= set(presets.read_versions(framework)), f"{framework}: {preset} names an unread version"
        record = BY_FUNCTION[preset.function]
        defaults = {k.name: k.default for k in record.keywords}
        for name, value in preset.keywords.items():
            assert name in defaults, f"{framework}.{preset.function}: {name} is no keyword of the record"
            assert value != defaults[name], f"{framework}.{preset.function}: {name}={value!r} is the canonical default"
            choices = record.keyword(name).choices
            assert not choices or value in choices, f"{framework}.{preset.function}: {name}={value!r}"
        assert preset.keywords, f"{framework}.{preset.function}: an empty preset (canonical: leave it out)"
        assert len(preset.source) >= 40 and ":" in preset.source, f"{framework}.{preset.function}: no citation"


def test_presets_of_a_function_are_in_framework_order_and_copies_are_independent():
    table = presets.presets_of("ppo_token_loss")
    assert list(table) == sorted(table) and {"verl", "openrlhf", "skyrl"} <= set(table)
    kw = presets.preset_kwargs("verl", "ppo_token_loss")
    kw["dual_clip"] = 99.0
    assert presets.preset_kwargs("verl", "ppo_token_loss") == {"dual_clip": 3.0, "log_ratio_clamp": 20.0}
    assert presets.preset_kwargs("trl", "ppo_token_loss") == {}  # canonical: no preset
    with pytest.raises(KeyError, match="no presets for 'nope'"):
        presets.preset_kwargs("nope", "ppo_token_loss")


def test_every_preset_runs_on_its_records_cases():
    """The oracle accepts every preset's keywords on the record's own cases (its required keywords from the
    case, the preset's on top)."""
    for framework in HOMES:
        for preset in HOMES[framework].PRESETS:
            record = BY_FUNCTION[preset.function]
            ran = 0
            for seed in range(20):
                case = record.make_case(seed)
                try:
                    record.oracle(*case.args.values(), **record.preset_kwargs(framework, case.kwargs))
                except ValueError:  # a combination the case's own keywords rule out (bound vs eps): next seed
                    continue
                ran += 1
            assert ran, f"{framework}.{preset.function}: no case accepts the preset"
