"""The trace format's spec section names every tensor and config key the recorder knows, and every link the
replay reports; each link's row points to its section."""

from __future__ import annotations

from conformance.spec import section, section_path
from conformance.trace.replay import LINKS
from rlspec.trace import CONFIG_KEYS, MICRO_TENSORS, STEP_TENSORS

TEXT = section("trace.grad")


def test_every_tensor_name_is_in_the_spec():
    missing = [n for n in [*MICRO_TENSORS, *STEP_TENSORS] if f"`{n}`" not in TEXT]
    assert not missing, missing


def test_every_config_key_is_in_the_spec():
    missing = [k for k in CONFIG_KEYS if f"`{k}`" not in TEXT]
    assert not missing, missing


def test_every_link_has_its_section():
    for name, _ in LINKS:
        assert section_path(f"trace.{name}").name == "trace.md"
        assert f"### trace.{name}" in TEXT or f"trace.{name}," in TEXT.split("### ")[0] or f", trace.{name}" in TEXT, name
