"""The records: one `Quantity` per quantity of the spec, the single source of everything rlspec knows
about it (signature, cases, golden entries, bad inputs, extremes, conditioning; presets and mutants by
discovery). Tests and conformance checks iterate `RECORDS`; nothing else lists the quantities.

The records are grouped by family in modules named like the oracle's and the refimpl's modules that
implement them (`oracle/policy_losses.py`, `refimpl/policy_losses.py`, `conformance/records/policy_losses.py`); each
module exports its `RECORDS`. `MODULES` fixes the order of the families (the order of every table).
Adding a quantity: docs/contributing.md.
"""

from __future__ import annotations

import fnmatch

from conformance.records import (
    advantages,
    aggregation,
    composite,
    controllers,
    covariance,
    entropy_terms,
    estimators,
    fused_head,
    gae,
    kl,
    logprobs,
    metrics,
    offpolicy,
    policy_losses,
    reward_shaping,
    rewards,
    sampling,
    value_loss,
    whiten,
)
from conformance.records.cases import Case
from conformance.records.record import GoldenCase, Quantity

# Families in spec order: the order of `RECORDS`, and so of every report, table and generated list.
MODULES = (logprobs, sampling, fused_head, advantages, rewards, gae, whiten, kl, policy_losses, value_loss, aggregation,
           metrics, composite, offpolicy, estimators, reward_shaping, covariance, entropy_terms, controllers)

# The spec families (a spec id's prefix) and what the tables call them.
FAMILIES = {
    "logprob": "log-probs and entropy", "adv": "advantage estimators", "reward": "rewards and shaping",
    "kl": "KL estimators and the KL term", "loss": "policy and value losses", "agg": "loss aggregation",
    "metric": "metrics", "offpolicy": "off-policy corrections", "select": "token selection",
    "entropy": "entropy terms", "ctrl": "coefficient controllers",
}

RECORDS: tuple[Quantity, ...] = tuple(r for module in MODULES for r in module.RECORDS)
BY_FUNCTION: dict[str, Quantity] = {r.function: r for r in RECORDS}


def records_for(spec_glob: str = "*") -> list[Quantity]:
    """Records whose spec id or function name matches a glob (`adv.*`, `loss.ppo`, `gae`); a spec id that
    names a family of rows (`agg`: `agg.token_mean`, ...) is also matched by its family glob `agg.*`."""
    return [r for r in RECORDS if any(fnmatch.fnmatch(name, spec_glob) for name in (r.spec_id, f"{r.spec_id}.*", r.function))]


def make_case(function: str, seed: int) -> Case:
    """The property case of `function` that `seed` names (the reproduction entry point)."""
    return BY_FUNCTION[function].make_case(seed)


def golden_catalogue() -> list[GoldenCase]:
    """Every golden entry of every record (hand-built, one per preset, seeded), record by record."""
    return [e for r in RECORDS for e in r.golden_entries(r.presets)]


def module_of(record: Quantity) -> str:
    """The module holding a record (`policy_losses`): its oracle and refimpl modules are named alike."""
    for module in MODULES:
        if record in module.RECORDS:
            return module.__name__.rsplit(".", 1)[-1]
    raise KeyError(record.function)


__all__ = ["MODULES", "FAMILIES", "RECORDS", "BY_FUNCTION", "records_for", "make_case", "golden_catalogue", "module_of", "Quantity",
           "GoldenCase"]
