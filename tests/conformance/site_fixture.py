"""A small, hand-written report JSON for the site tests (schema report-v3), with one row of every kind
the matrix shows, and an HTML reader for the built pages."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from conformance.runner.discovery import framework_names
from conformance.site.build import REPORTS_DIR, build_site

# the label `conformance.runner.diagnosis` gives the mutant agg_empty_rows_nan (conformance/mutants/agg_empty_rows_nan.py)
AGG_NAN = ("masked mean without a zero-count guard: a row or batch with no valid token gives NaN "
           "[mutant agg_empty_rows_nan, bug-catalogue #26]")
FAIL_REPRO = "rlspec repro aggregate --vector aggregate/all-masked-token-mean --adapter {a} --kw \"mode='token_mean'\""


def _row(adapter: str, function: str, spec_id: str, status: str, *, id: str | None = None, **fields: Any) -> dict[str, Any]:
    row = {
        "id": id or f"{function}@{adapter}", "spec_id": spec_id, "function": function, "adapter": adapter,
        "status": status, "matched_preset": None, "matched_kwargs": None, "max_abs_err": None, "max_rel_err": None,
        "message": "", "consistent_with": [], "pattern_hints": [], "checks": {"property": status if status in ("pass", "fail") else "pass"},
        "n_cases": 3, "counts": {"property": 3, "golden": 0, "invariant": 0, "preset": 0}, "thin": False, "notes": [],
        "seeds": [11, 12], "seconds": 0.01, "precision": {}, "precision_findings": [],
        "not_implemented_cases": [], "reproduce": "", "failures": [],
    }
    row.update(fields)
    return row


def report(adapter: str = "trl", version: str = "9.9.9") -> dict[str, Any]:
    """A report of adapter `adapter` whose rows are, in order: pass with a precision finding, its own
    preset, another framework's preset (a variant for a framework column), FAIL with a reproduce line
    and a mutant fingerprint, error, pass with keyword values not implemented, not implemented, a
    shared partition row, and one framework row (FAIL, no reproduce line)."""
    a = adapter
    checks = [
        _row(a, "token_logprobs", "logprob.token", "pass", precision={"float64": "float64", "bfloat16": "below_bfloat16"},
             precision_findings=[{
                 "dtype": "bfloat16", "meets": "below_bfloat16", "max_abs_err": 0.09, "max_rel_err": 1.0,
                 "case": "property check, seed 11, bfloat16", "note": "softmax in bfloat16",
                 "message": "bfloat16 inputs: outputs meet below bfloat16 precision, not bfloat16",
                 "reproduce": f"rlspec repro token_logprobs --seed 11 --dtype bfloat16 --adapter {a}"}]),
        _row(a, "grpo_advantages", "adv.grpo", "preset", matched_preset="trl", matched_kwargs={"eps": 0.0001},
             message="matches preset trl (eps=0.0001), not canonical"),
        _row(a, "ppo_token_loss", "loss.ppo", "preset", matched_preset="openrlhf",
             matched_kwargs={"log_ratio_clamp": 20.0}, message="matches preset openrlhf, not canonical"),
        _row(a, "aggregate", "agg", "fail", checks={"property": "pass", "golden": "fail"}, max_abs_err=float("inf"),
             message=("[aggregate | spec agg | adapter=" + a + " | float64]\nvalue: the greatest absolute difference inf "
                      "at index () (actual nan, expected 0)\nReproduce: " + FAIL_REPRO.format(a=a)),
             consistent_with=[AGG_NAN], reproduce=FAIL_REPRO.format(a=a)),
        _row(a, "gae", "adv.gae", "error", checks={"golden": "error"},
             message="ValueError: At least one element in the mask has to be 1.",
             reproduce=f"rlspec repro gae --vector gae/all-rows-masked --adapter {a}"),
        _row(a, "rollout_is_weights", "offpolicy.is_weights", "pass",
             not_implemented_cases=["mode='none': every mode bounds the ratio"]),
        _row(a, "whiten", "adv.whiten", "not_implemented", checks={}, n_cases=0,
             message="adapter has no whiten"),
        _row(a, "agg.partition[token_mean]", "agg.token_mean", "pass", checks={"invariant:partition": "pass"}),
        _row(a, f"{a}.own_loss", "loss.ppo+agg", "fail", id=f"{a}.own_loss[clip=0.3]", checks={"value": "fail"},
             message="own loss: 2/8 elements off"),
    ]
    return {
        "schema": "report-v3", "suite_version": "0.1.0", "spec_version": "v1", "created": "2026-01-02T03:04:05+00:00",
        "seed": 0, "n_seeds": 8, "reproduce": f"rlspec check --seed 0 --n-seeds 8 --adapter {a}",
        "strict_precision": False, "fail_on": ["fail", "error", "precision"],
        "environment": {"python": "3.11", "numpy": "2", "torch": "2.13"},
        "adapters": [{"name": a, "version": version, "spec_version": "v1", "status": "ok", "message": "", "ref": a}],
        "checks": checks, "seconds": 1.0, "ok": False,
    }


@dataclass(frozen=True)
class Built:
    """A site built from a snapshot of the committed reports (other work may rewrite them meanwhile)."""

    out: Path
    reports: Path
    names: tuple[str, ...]


def build_committed(tmp: Path, extra_reports: tuple[Path, ...] = ()) -> Built:
    """Copy conformance/reports/ and the framework list, build the site from the copy."""
    names = framework_names()
    reports = tmp / "reports"
    shutil.copytree(REPORTS_DIR, reports)
    out = tmp / "site"
    build_site(out, reports_dir=reports, names=names, extra_reports=extra_reports)
    return Built(out, reports, names)


class Element:
    def __init__(self, tag: str, attrs: dict[str, str]):
        self.tag, self.attrs, self.text = tag, attrs, ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Page(HTMLParser):
    """Every element of an HTML page with its attributes and text content."""

    VOID = frozenset({"meta", "link", "img", "br", "input", "hr"})

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(el)
        if tag not in self.VOID:
            self._open.append(el)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                return

    def handle_data(self, data: str) -> None:
        for el in self._open:
            el.text += data

    def find(self, tag: str, cls: str | None = None, **attrs: str) -> list[Element]:
        return [e for e in self.elements if e.tag == tag and (cls is None or cls in e.classes)
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def ids(self) -> set[str]:
        return {e.attrs["id"] for e in self.elements if "id" in e.attrs}
