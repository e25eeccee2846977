"""GDPO on a batch of one sequence is NaN (ms-swift 4.6.0, finding gdpo-batch-of-one-nan).

`compute_advantages(..., scale_rewards="gdpo")` (swift/rl_core/advantage.py:83-94) z-scores each reward function per
group, sums them, and whitens the sum over the whole batch with `(s - s.mean()) / (s.std() + 1e-8)` (:93). torch's
unbiased std of one element is NaN, so a batch of one sequence gets a NaN advantage, where the "group" and "batch"
scales guard `numel() > 1` / `K > 1` (:75, :80) and give 0. The trainer calls it on the rewards gathered over every
process (grpo_trainer.py:376-377, :459-468), so the batch is the whole generation batch. One sequence there needs
num_generations = 1, which RLHFArguments refuses for GRPO only without a teacher (arguments/rlhf_args.py:409-410):
on-policy distillation (OPD-RL: teacher_model or teacher_model_server set) with reward_funcs (gdpo without them is
refused, :696-698), scale_rewards="gdpo", num_generations=1 and a generation batch of one (per_device_train_batch_size
1 on one process, steps_per_generation 1; GRPOConfig checks no divisibility when num_generations = 1,
rlhf_trainers/args_mixin.py:205-207, :224). The NaN base advantage then reaches every token, teacher term added
(advantage.py:287-290).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python gdpo-batch-of-one-nan.py

Expected (spec gdpo_advantages, by hand): each reward function's z-score in a group of one is 0 (nan_to_num, as
ms-swift does too), their weighted sum is 0, and whitening one value over the batch centres it to 0: advantage [0],
per-token advantage = 0 + teacher_kl_coef * (teacher - student) = [0.5, -0.25] for the log-ratios below.

Actual:
    generation_batch_size: 1 (steps_per_generation 1, scale_rewards gdpo)
    gdpo advantages, one sequence: [nan]
    per-token advantages with the teacher term: [nan, nan]
    gdpo advantages, two sequences: [0.0, 0.0]
    batch scale, one sequence: [0.0]
"""

import tempfile
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from swift.rl_core.advantage import compute_advantages, expand_advantage_to_per_token  # noqa: E402
from swift.rlhf_trainers.arguments import GRPOConfig  # noqa: E402

# the trainer's config for that run: ms-swift derives the generation batch from it
args = GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], num_generations=1,
                  per_device_train_batch_size=1, gradient_accumulation_steps=1, scale_rewards="gdpo")
print(f"generation_batch_size: {args.generation_batch_size} (steps_per_generation {args.steps_per_generation}, "
      f"scale_rewards {args.scale_rewards})")


def fmt(xs):
    return [round(float(x), 4) for x in xs]


weights = torch.tensor([1.0, 1.0])  # two reward functions (e.g. accuracy and format)
one = torch.tensor([[1.0, 2.0]])  # [N = 1, n_funcs = 2]
adv, _ = compute_advantages(one, weights, args.num_generations, advantage_estimator="grpo", scale_rewards="gdpo")
print("gdpo advantages, one sequence:", fmt(adv))
mask = torch.ones(1, 2, dtype=torch.bool)
teacher, student = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.75]])
per_token = expand_advantage_to_per_token(adv, mask, teacher_per_token_logps=teacher, policy_per_token_logps=student,
                                          teacher_kl_coef=1.0)
print("per-token advantages with the teacher term:", fmt(per_token[0]))
two = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
adv2, _ = compute_advantages(two, weights, 1, advantage_estimator="grpo", scale_rewards="gdpo")
print("gdpo advantages, two sequences:", fmt(adv2))
adv3, _ = compute_advantages(one, weights, 1, advantage_estimator="grpo", scale_rewards="batch")
print("batch scale, one sequence:", fmt(adv3))
