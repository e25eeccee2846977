"""The rollout IS weight multiplies the KL term too (ms-swift 4.6.0, finding rollout-is-weight-multiplies-kl).

With `rollout_importance_sampling_mode` set, the loss method adds `beta * per_token_kl` to the policy term first
(swift/rlhf_trainers/grpo_trainer.py:1063-1064) and then multiplies the sum by `rollout_is_weights` (:1066-1067), so
the KL regulariser is importance-weighted as well. With A = 0 the loss is the KL term alone; token_truncate with
rho = pi_old / pi_rollout = e above the threshold 2 weights it by 2. Reached with beta > 0 (KL in the loss) and any
rollout_importance_sampling_mode (vLLM rollouts with their log-probs).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python rollout-is-weight-multiplies-kl.py

Expected (spec corrected_policy_loss canonical, weight_kl=False, by hand): the IS weight scales the policy term only;
with A = 0 the loss is beta * k3 = exp(-0.5) + 0.5 - 1 = 0.1065 with or without the correction. ms-swift gives
2 * 0.1065 = 0.2131 (the spec's preset ms_swift, weight_kl=True).

Actual:
    loss without correction: 0.1065
    loss with token_truncate: 0.2131
"""

import tempfile
import types
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from swift.rl_core.data import GRPOBatch  # noqa: E402
from swift.rlhf_trainers.arguments import GRPOConfig  # noqa: E402
from swift.rlhf_trainers.grpo_trainer import GRPOTrainer  # noqa: E402


def trainer(batch_size, num_processes=1, grad_accum=1, **settings):
    """GRPOTrainer.__init__ needs a registered model, a template, datasets and a rollout engine, none of them loss
    math: a stand-in made with __new__ gets what __init__ would set, from ms-swift's own code where it computes it
    (GRPOConfig, _prepare_algorithm_params, _prepare_metrics); the rest as the mixins set it on a plain run."""
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], num_generations=1,
                      per_device_train_batch_size=batch_size, gradient_accumulation_steps=grad_accum, **settings)
    t = GRPOTrainer.__new__(GRPOTrainer)
    t.args, t.beta = args, args.beta
    t._prepare_algorithm_params()
    t._prepare_metrics()
    t.num_generations, t.temperature = args.num_generations, args.temperature
    t.max_completion_length = args.max_completion_length
    t.disable_rollout_importance_sampling, t.dynamic_num_samples, t._has_teacher = False, False, False
    t.chord_sft_iterator, t.model_accepts_loss_kwargs, t.compute_loss_func = None, False, None
    t.model = torch.nn.Linear(1, 1).train()  # only model.training is read
    t.template = types.SimpleNamespace(padding_free=False, sequence_parallel_size=1)
    t.accelerator = types.SimpleNamespace(num_processes=num_processes, device=torch.device("cpu"),
                                          is_main_process=True, gather_for_metrics=lambda x: x)
    t.current_gradient_accumulation_steps = grad_accum
    return t


def loss(settings, logp, old, adv, mask=None, entropies=None, num_items=None, grad_accum=1, **batch_fields):
    """_compute_loss_and_metrics on one micro-batch; returns (loss, d loss / d logp)."""
    mask = torch.ones(logp.shape, dtype=torch.bool) if mask is None else mask
    t = trainer(logp.shape[0], grad_accum=grad_accum, **settings)
    logp = logp.clone().requires_grad_(True)
    # the model forward is replaced: it returns the log-probs the gradient is taken at (and the entropies)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropies)
    batch = GRPOBatch(completion_mask=mask, truncated_mask=torch.zeros(mask.shape[0], dtype=torch.bool),
                      seq_lengths=mask.sum(-1), old_per_token_logps=old, advantages=adv,
                      num_items_in_batch=mask.sum() if num_items is None else torch.tensor(float(num_items)),
                      **batch_fields)
    value, _ = t._compute_loss_and_metrics(t.model, {}, batch)
    value.backward()
    return value, logp.grad


def fmt(xs):
    return [round(float(x), 4) for x in xs]


lp = torch.full((1, 2), -1.0)
ref = torch.full((1, 2), -1.5)
adv = torch.zeros(1, 2)
value, _ = loss({"loss_type": "bnpo", "beta": 1.0}, lp, lp.clone(), adv, ref_per_token_logps=ref)
print("loss without correction:", round(float(value), 4))
value, _ = loss({"loss_type": "bnpo", "beta": 1.0, "rollout_importance_sampling_mode": "token_truncate"}, lp,
                lp.clone(), adv, ref_per_token_logps=ref, rollout_per_token_logps=lp - 1.0)
print("loss with token_truncate:", round(float(value), 4))
