"""The DAPO overlong penalty never fires with a zero buffer (openrlhf 0.11.2, finding overlong-buffer-zero-never-penalises).

`apply_length_penalties` (trainer/ppo_utils/length_penalty.py:109-153, called by the experience maker,
trainer/ppo_utils/experience_maker.py:246-247) passes `--reward.overlong_buffer_len` and `--rollout.max_new_tokens`
(or `--data.max_len` when unset, :127) to `apply_overlong_penalty`, which computes
`exceed = min(L - (max_new_tokens - buffer), buffer)` and penalises only when `exceed > 0` (:41-56). With
buffer 0 that is `min(L - max_new_tokens, 0)`, never positive: no response is penalised, however long, although
the function's own docstring says it penalises responses that exceed max_new_tokens - buffer (:25). The length L
is `Experience.response_length`, first to last action token (trainer/ppo_utils/samples_generator.py:271-273).
On the single-turn path vLLM stops at max_new_tokens (samples_generator.py:203), so L <= max_new_tokens and DAPO's
penalty is 0 too; on the agent path (`--train.agent_func_path`, a MultiTurnAgentExecutor) each turn's budget is
max_len minus the tokens so far (utils/agent.py:94), not max_new_tokens, and L spans every turn and the
environment feedback between them, so L > max_new_tokens happens and goes unpenalised.

Run: pip install openrlhf==0.11.2 torch (on a CPU machine: pip install --no-deps openrlhf==0.11.2 torch
transformers); python overlong-buffer-zero-never-penalises.py

Expected (spec reward.overlong, DAPO arXiv:2503.14476 eq. 13, by hand): with L_max = max_new_tokens = 8,
L_cache = buffer = 0 and factor 1, the penalty is 0 for L <= 8 and -1 for L > 8; on rewards of 1 the lengths
[7, 8, 9, 20] give [1, 1, 0, 0]. With buffer 4 (for contrast) eq. 13 gives -(L - 4)/4, floored at -1:
[0.25, 0, 0, 0].

Actual:
    buffer 0: [1.0, 1.0, 1.0, 1.0]
    buffer 4: [0.25, 0.0, 0.0, 0.0]
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


import logging  # noqa: E402
from types import SimpleNamespace as ns  # noqa: E402

import torch  # noqa: E402

length_penalty = load("openrlhf.trainer.ppo_utils.length_penalty")
Experience = load("openrlhf.trainer.ppo_utils.experience").Experience
logging.disable(logging.INFO)  # OpenRLHF logs "[DAPO Overlong Penalty] n/4 samples penalized" to stdout

for buffer in (0.0, 4.0):
    # the CLI's argument groups as apply_length_penalties reads them (cli/train_ppo_ray.py:400-404, :532-542)
    args = ns(reward=ns(overlong_buffer_len=buffer, overlong_penalty_factor=1.0, stop_properly_penalty_coef=None),
              rollout=ns(max_new_tokens=8), data=ns(max_len=64))
    experience = Experience(rewards=torch.ones(4), response_length=torch.tensor([7, 8, 9, 20]), info={})
    length_penalty.apply_length_penalties([experience], args)
    print(f"buffer {buffer:g}:", [round(float(x), 4) + 0.0 for x in experience.rewards])
