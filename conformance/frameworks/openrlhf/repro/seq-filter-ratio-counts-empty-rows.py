"""The sequence-level filter ratio counts a row without action tokens as filtered (openrlhf 0.11.2, finding
seq-filter-ratio-counts-empty-rows).

With `--algo.advantage.is_correction_level seq` (mode "mask"), `PolicyLoss` gates each row on the geometric
mean of its importance ratio, `masked_mean(log_ratio, action_mask, dim=-1)` (models/loss.py:222-224), and logs
`is_filter_ratio = filtered.float().mean()` over all B rows (:243-244). A row with no action token has a 0/0 =
NaN mean (models/utils.py:199-202), fails `low <= stat <= high` (:238) and is counted as filtered, so the logged
ratio over-reports. A metric only: the row's coefficient multiplies nothing valid, the loss is unaffected.
Reached in a batch holding a row with no action token: a MultiTurnAgentExecutor that stops before its first
turn (utils/agent.py:94-97, e.g. a prompt of max_len tokens or more with `--rollout.max_new_tokens` equal to
`--data.max_len`, where the truncation `tokens[-0:]` at :75 keeps the whole prompt), or a custom AgentExecutor
returning no action range.

Run: pip install openrlhf==0.11.2 torch (on a CPU machine: pip install --no-deps openrlhf==0.11.2 torch
transformers); python seq-filter-ratio-counts-empty-rows.py

Expected (by hand, the fraction of sequences the gate rejects): row 0 has 3 action tokens with ratio 1
(geometric mean 1, inside [0.5, 5]: kept); row 1 has none, so there is nothing to gate: 0 of 1 sequence
filtered, ratio 0.0.

Actual:
    is_filter_ratio: 0.5
"""

import importlib
import importlib.util
import sys
import types
from pathlib import Path


def load(name):
    """Import openrlhf module `name`. A full install (GPU: flash-attn, deepspeed, ray) imports as usual. With
    `pip install openrlhf==0.11.2 --no-deps` on a CPU machine the package __init__ files fail (they import the
    actor, flash-attn and the DeepSpeed strategy): then the subpackages are registered as bare packages whose
    modules load from the installed files (only the __init__ files are skipped), and deepspeed / ray are empty
    modules (imported at the top of the modules used here, never called by the code this script runs)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    for key in [k for k in sys.modules if k == "openrlhf" or k.startswith("openrlhf.")]:
        del sys.modules[key]
    root = Path(importlib.util.find_spec("openrlhf").submodule_search_locations[0])
    importlib.import_module("openrlhf")
    for pkg in ("openrlhf.models", "openrlhf.utils", "openrlhf.trainer", "openrlhf.trainer.ray"):
        module = types.ModuleType(pkg)
        module.__path__ = [str(root.joinpath(*pkg.split(".")[1:]))]
        sys.modules[pkg] = module
    for dep in ("deepspeed", "ray"):
        if importlib.util.find_spec(dep) is None:
            sys.modules[dep] = types.ModuleType(dep)
    launcher = types.ModuleType("openrlhf.trainer.ray.launcher")  # experience_maker names RayActorGroup in annotations
    launcher.RayActorGroup = type("RayActorGroup", (), {})
    sys.modules["openrlhf.trainer.ray.launcher"] = launcher
    return importlib.import_module(name)


import torch  # noqa: E402

loss = load("openrlhf.models.loss")
policy_loss = loss.PolicyLoss(is_correction_level="seq", is_correction_mode="mask", is_correction_threshold=(0.5, 5.0))
action_mask = torch.tensor([[0, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
log_probs = torch.full((2, 4), -1.0)
out = policy_loss(log_probs, log_probs.clone(), -torch.ones(2, 4), action_mask=action_mask,
                  rollout_log_probs=log_probs.clone())
print("is_filter_ratio:", round(float(out[4]), 4))
