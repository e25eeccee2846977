"""GAE with a masked environment token inside a completion (openrlhf 0.11.2, finding gae-internal-mask-not-skipped).

`RemoteExperienceMaker.get_advantages_and_returns` (trainer/ppo_utils/experience_maker.py:343-387) multiplies the
values and rewards by the action mask (:376-378) and runs the plain recursion over every position (:380-385). On
the agent path (`--train.agent_func_path`, a MultiTurnAgentExecutor) each turn's action range is recorded
(utils/agent.py:108-111) and the environment feedback tokens are appended after it (:152-154), so the action
mask built from the ranges (trainer/ppo_utils/samples_generator.py:255-258) has zeros inside a completion. Such
a token is then a step with V = 0 and r = 0: the action before it bootstraps from 0 instead of the critic's
value at the next action. Reached with `--algo.advantage.estimator gae` and `--algo.advantage.lambd` < 1 (or
`--algo.advantage.gamma` < 1); the CLI defaults gamma = lambd = 1 give the same advantages as skipping.

Run: pip install openrlhf==0.11.2 torch (on a CPU machine: pip install --no-deps openrlhf==0.11.2 torch
transformers); python gae-internal-mask-not-skipped.py

Expected (spec adv.gae, by hand): mask [0, 1, 1, 0, 1] (position 3 an environment token), r = [0, 0, 0, 0, 1],
V = [0, 0.5, 0.5, 9, 0.5], gamma 1, lambda 0.5; the masked positions are skipped, t = 4: delta = 1 - 0.5 = 0.5,
A = 0.5; t = 2: delta = 0 + 0.5 - 0.5 = 0, A = 0 + 0.5 * 0.5 = 0.25; t = 1: delta = 0, A = 0.5 * 0.25 = 0.125:
advantages at the action tokens [0, 0.125, 0.25, 0, 0.5]. At gamma = lambda = 1 each A_t is the reward to come
minus V_t: [0, 0.5, 0.5, 0, 0.5] (OpenRLHF agrees there).

Actual:
    advantages at action tokens: [0.0, -0.0625, -0.125, 0.0, 0.5]
    same at gamma = lambda = 1: [0.0, 0.5, 0.5, 0.0, 0.5]
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
# get_advantages_and_returns reads nothing from self: a bare instance stands in for the Ray-built maker
maker = em.RemoteExperienceMaker.__new__(em.RemoteExperienceMaker)
mask = torch.tensor([[0, 1, 1, 0, 1]], dtype=torch.bool)
rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
values = torch.tensor([[0.0, 0.5, 0.5, 9.0, 0.5]])
adv, _ = maker.get_advantages_and_returns(values, rewards, mask, 1.0, 0.5)
print("advantages at action tokens:", [round(float(x), 4) for x in (adv * mask)[0]])
adv1, _ = maker.get_advantages_and_returns(values, rewards, mask, 1.0, 1.0)
print("same at gamma = lambda = 1:", [round(float(x), 4) for x in (adv1 * mask)[0]])
