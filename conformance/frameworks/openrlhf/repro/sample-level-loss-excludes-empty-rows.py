"""The sample-level loss leaves rows without an action token out of the number of sequences (openrlhf 0.11.2,
finding sample-level-loss-excludes-empty-rows).

`aggregate_loss(token_level_loss=False)` (models/loss.py:34-39) averages the per-sequence token means over the
rows with at least one valid token (`seq_mask = token_counts > 0`, "exclude fully masked sequences", :36), and
the trainer's normaliser `get_loss_batch_info` counts only those rows as `global_batch_size`
(utils/loss_utils.py:39-43; the per-step windows the same, :73, and the dynamic batches, trainer/ppo_utils/
replay_buffer.py:155-157). The spec's seq_mean_token_mean divides by every row of the batch. Deliberate (the
comment at :36), so a convention. Reached with `--actor.loss_agg_mode seq-mean-token-mean` (trainer/ray/
ppo_actor.py:80) or `--actor.policy_loss_type gspo` (which forces the sample level, models/loss.py:150-152), in a
batch holding a row with no action token: a MultiTurnAgentExecutor that stops before its first turn (utils/
agent.py:94-97: no budget left, e.g. a prompt of max_len tokens or more with `--rollout.max_new_tokens` equal to
`--data.max_len`, where the truncation `tokens[-0:]` at :75 keeps the whole prompt), or a custom AgentExecutor
returning no action range (the action mask is 1 only on the returned ranges, trainer/ppo_utils/
samples_generator.py:255-258).

Run: pip install openrlhf==0.11.2 torch (on a CPU machine: pip install --no-deps openrlhf==0.11.2 torch
transformers); python sample-level-loss-excludes-empty-rows.py

Expected (spec agg seq_mean_token_mean, by hand): per-token loss [[0, 1, 3], [0, 5, 5]] on mask [[0, 1, 1],
[0, 0, 0]]: row 0's token mean is (1 + 3) / 2 = 2, row 1 has no valid token (mean 0); over S = 2 rows: (2 + 0) / 2
= 1.0, and global_batch_size S = 2.

Actual:
    aggregate_loss (local): 2.0
    get_loss_batch_info global_batch_size: 1.0
    aggregate_loss (trainer normalisers): 2.0
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


from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402

loss = load("openrlhf.models.loss")
loss_utils = load("openrlhf.utils.loss_utils")
per_token = torch.tensor([[0.0, 1.0, 3.0], [0.0, 5.0, 5.0]])
mask = torch.tensor([[0, 1, 1], [0, 0, 0]], dtype=torch.bool)
print("aggregate_loss (local):", round(float(loss.aggregate_loss(per_token, mask, token_level_loss=False)), 4))
# one process, no torch.distributed: get_loss_batch_info reads the strategy only for a device mesh
info = loss_utils.get_loss_batch_info(SimpleNamespace(), mask)
print("get_loss_batch_info global_batch_size:", round(float(info["global_batch_size"]), 4))
print("aggregate_loss (trainer normalisers):", round(float(loss.aggregate_loss(per_token, mask, token_level_loss=False, **info)), 4))
