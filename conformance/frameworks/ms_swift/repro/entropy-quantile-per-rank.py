"""The top-entropy mask is taken per rank (ms-swift 4.6.0, finding entropy-quantile-per-rank).

With `top_entropy_quantile < 1` the loss method thresholds the entropies at
`torch.nanquantile(entropies.flatten().float(), 1 - top_entropy_quantile)` of the tensor it holds
(swift/rlhf_trainers/grpo_trainer.py:958-962): the rank's own micro-batch, with nothing gathered across ranks or
accumulation steps. Two ranks holding entropies [1, 2] and [3, 4] each keep their own top half. Reached with any
top_entropy_quantile < 1 on more than one process (or more than one accumulation step).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python entropy-quantile-per-rank.py

Expected (spec entropy_top_mask with the batch's pooled entropies, by hand): rho = 0.5 of the pooled [1, 2, 3, 4]
keeps the tokens at or above the median 2.5, i.e. {3, 4}. With A = -1 on-policy each kept token's loss is 1, so
under bnpo rank 0 (nothing kept) has loss 0/2 = 0 and rank 1 (both kept) 2/2 = 1.

Actual:
    rank 0 loss: 0.5
    rank 1 loss: 0.5
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


lp = torch.tensor([[-1.0, -1.0]])
for rank, ent in enumerate(([1.0, 2.0], [3.0, 4.0])):
    value, _ = loss({"loss_type": "bnpo", "top_entropy_quantile": 0.5}, lp, lp.clone(), torch.full((1, 2), -1.0),
                    entropies=torch.tensor([ent]))
    print(f"rank {rank} loss:", round(float(value), 4))
