"""The advantage whitening divides by the population standard deviation (openrlhf 0.11.2, finding
advantage-whitening-population-std).

`RemoteExperienceMaker.compute_advantages_and_returns` whitens the advantages of the estimators "gae",
"reinforce" and "reinforce_baseline" over every action token of the rollout batch with
`var = sum((A - mean)^2 * mask) / num_actions` (trainer/ppo_utils/experience_maker.py:324-339): the biased
(population) variance, std_ddof = 0, where the spec's whitening (adv.whiten, REINFORCE++ arXiv:2501.03262)
uses the sample variance. A choice (preset openrlhf, `std_ddof=0`), not a bug; it matters for small batches.
Reached with `--algo.advantage.estimator gae`, `reinforce` or `reinforce_baseline` without
`--algo.advantage.no_std_norm`.

Run: pip install openrlhf==0.11.2 torch (on a CPU machine: pip install --no-deps openrlhf==0.11.2 torch
transformers); python advantage-whitening-population-std.py

Expected (spec adv.reinforce_pp_baseline, by hand): 2 prompts x 2 samples, one action token each, scores
[1, 0] and [2, 0]; minus the group mean: [0.5, -0.5, 1, -1] (mean 0); sample variance (0.25 + 0.25 + 1 + 1) / 3
= 0.8333, std 0.9129: advantages [0.5477, -0.5477, 1.0954, -1.0954]. (The population variance 2.5 / 4 = 0.625,
std 0.7906, gives [0.6325, -0.6325, 1.2649, -1.2649].)

Actual:
    advantages: [0.6325, -0.6325, 1.2649, -1.2649]
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


from types import SimpleNamespace as ns  # noqa: E402

import torch  # noqa: E402

em = load("openrlhf.trainer.ppo_utils.experience_maker")
Experience = load("openrlhf.trainer.ppo_utils.experience").Experience
FixedKLController = load("openrlhf.trainer.ppo_utils.kl_controller").FixedKLController

# the CLI's argument groups that compute_advantages_and_returns reads (cli/train_ppo_ray.py), KL reward off
args = ns(algo=ns(advantage=ns(estimator="reinforce_baseline", gamma=1.0, lambd=1.0, no_std_norm=False)),
          rollout=ns(n_samples_per_prompt=2, max_new_tokens=None),
          reward=ns(clip_range=None, overlong_buffer_len=None, stop_properly_penalty_coef=None), data=ns(max_len=None))
maker = em.RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), ns(args=args), None)
experience = Experience(action_mask=torch.ones(4, 1, dtype=torch.bool), kl=torch.zeros(4, 1),
                        rewards=torch.tensor([1.0, 0.0, 2.0, 0.0]), index=[0, 1, 2, 3], info={})
(out,) = maker.compute_advantages_and_returns([experience])
print("advantages:", [round(float(x), 4) for x in out.advantages[:, 0]])
