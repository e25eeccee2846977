"""REINFORCE++'s return discounts across the masked tokens inside a completion (openrlhf 0.11.2, finding
reinforce-return-discounts-across-masked-positions).

`RemoteExperienceMaker.get_cumulative_returns` (trainer/ppo_utils/experience_maker.py:389-421) multiplies the
rewards by the action mask (:413-414) and accumulates `r_t + gamma * G` over every position (:417-419), so a
masked environment token between two turns' actions costs a factor gamma without being a step of the return:
the spec's `gap="discount"` (preset openrlhf), where the canonical rule skips masked positions (verl's). Reached
with `--algo.advantage.estimator reinforce` and `--algo.advantage.gamma` < 1 (the other estimators force gamma
to 1, :308-310) on the agent path (`--train.agent_func_path`, a MultiTurnAgentExecutor: each turn's action
range, utils/agent.py:108-111, with the environment feedback appended after it, :152-154, so the action mask
built from the ranges, trainer/ppo_utils/samples_generator.py:255-258, has zeros inside a completion).

Run: pip install openrlhf==0.11.2 torch (on a CPU machine: pip install --no-deps openrlhf==0.11.2 torch
transformers); python reinforce-return-discounts-across-masked-positions.py

Expected (spec adv.reinforce_pp, returns, by hand): mask [0, 1, 0, 1] (position 2 an environment token),
r = [0, 0, 0, 1], gamma 0.5. Skipping the masked position (canonical): G_3 = 1, G_1 = 0 + 0.5 * 1 = 0.5; with
gap="discount" G_1 = 0 + 0.5^2 * 1 = 0.25. Returns at the action tokens: [0, 0.5, 0, 1] (canonical),
[0, 0.25, 0, 1] (discount).

Actual:
    returns at action tokens: [0.0, 0.25, 0.0, 1.0]
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

em = load("openrlhf.trainer.ppo_utils.experience_maker")
# get_cumulative_returns reads nothing from self: a bare instance stands in for the Ray-built maker
maker = em.RemoteExperienceMaker.__new__(em.RemoteExperienceMaker)
mask = torch.tensor([[0, 1, 0, 1]], dtype=torch.bool)
rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
returns = maker.get_cumulative_returns(rewards, mask, 0.5)
print("returns at action tokens:", [round(float(x), 4) for x in (returns * mask)[0]])
