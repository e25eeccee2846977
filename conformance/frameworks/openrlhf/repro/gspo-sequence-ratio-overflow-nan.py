"""GSPO's sequence log-ratio is not clamped: an overflowing ratio makes the loss NaN (openrlhf 0.11.2, finding
gspo-sequence-ratio-overflow-nan).

`PolicyLoss` clamps the PPO log-ratio at +-20 (models/loss.py:186-188) but for `policy_loss_type="gspo"` takes
`exp` of the row's mean log-ratio unclamped and multiplies it by the action mask (:189-196). A row whose mean
log-ratio exceeds float32's exp range (88.7) gets ratio inf: at its masked positions (the prompt positions of
every row, since the action mask spans the whole sequence) inf * 0 = NaN, and so does -A * inf at A = 0. The
aggregate multiplies by the mask (:34-39), so one such row makes the step's loss NaN. Reached with
`--actor.policy_loss_type gspo` whenever a sequence's mean log-ratio against the old policy (or the rollout
policy, with `--algo.advantage.is_correction_level` on, :191-194) passes 88.7.

Run: pip install openrlhf==0.11.2 torch (on a CPU machine: pip install --no-deps openrlhf==0.11.2 torch
transformers); python gspo-sequence-ratio-overflow-nan.py

Expected (spec loss.gspo with OpenRLHF's clip 0.2 / 0.2, then the per-sample mean OpenRLHF's GSPO uses, by hand):
row 0 has mean log-ratio 800 and A = 0, so each of its tokens' loss is -0 * s = 0 whatever s; row 1 has
log-ratios [-0.1, 0.2], s = e^0.05 = 1.0513 inside the clip, A = 1: loss -1.0513 per token. Sample mean over the
2 rows: (0 - 1.0513) / 2 = -0.5256. The gradient w.r.t. row 1's log-probs is -A * s / n / 2 = -0.2628 per token,
row 0's is 0.

Actual:
    loss: nan
    grad row 0: [nan, nan, nan]
    grad row 1: [0.0, -0.2628, -0.2628]
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
policy_loss = loss.PolicyLoss(policy_loss_type="gspo")  # the actor's PolicyLoss with the CLI's clip 0.2 / 0.2
action_mask = torch.tensor([[0, 1, 1], [0, 1, 1]], dtype=torch.bool)  # position 0: the prompt
old_log_probs = torch.tensor([[0.0, -801.0, -801.0], [0.0, -1.0, -1.2]])
log_probs = torch.tensor([[0.0, -1.0, -1.0], [0.0, -1.1, -1.0]], requires_grad=True)
advantages = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
value = policy_loss(log_probs, old_log_probs, advantages, action_mask=action_mask)[0]
value.backward()
print("loss:", round(float(value.detach()), 4))
for b in range(2):
    print(f"grad row {b}:", [round(float(x), 4) + 0.0 for x in log_probs.grad[b]])
