"""SAPO's gradient is NaN on an overflowing ratio (ms-swift 4.6.0, finding sapo-gradient-overflowing-ratio-nan).

loss_type "sapo" in `GRPOTrainer._compute_loss_and_metrics` gates the advantage with `sigmoid(tau (coef_1 - 1))`
(swift/rlhf_trainers/grpo_trainer.py:1039-1045), `coef_1 = exp(log-ratio)` unclamped (:1025). At a float32
log-ratio above ~88.7 the ratio is inf: the value is fine (the gate saturates at 4/tau), but autograd multiplies
sigmoid' = 0 by d coef_1 / d logp = coef_1 = inf, and 0 * inf = NaN reaches the step's gradient. Reached with
loss_type="sapo" once the policy has moved since the rollout (num_iterations > 1, or steps_per_generation >
gradient_accumulation_steps).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python sapo-gradient-overflowing-ratio-nan.py

Expected (spec sapo_token_loss, by hand, tau_pos = 1): token 0 (log-ratio 100, A = 1) has value -4/tau * A = -4 and
gradient -A 4 sigma (1 - sigma) r -> 0; token 1 (r = 1, A = 1) has value -4 sigma(0) = -2 and gradient
-A 4 (1/4) 1 = -1. The row mean (sapo reduces like grpo): value -3, gradient [0, -0.5].

Actual:
    loss: -3.0
    grad: [nan, -0.5]
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


value, grad = loss({"loss_type": "sapo"}, torch.tensor([[-1.0, -1.0]]), torch.tensor([[-101.0, -1.0]]),
                   torch.tensor([[1.0, 1.0]]))
print("loss:", round(float(value), 4))
print("grad:", fmt(grad[0]))
