"""The oracle package itself: exports, signatures from api.md, docstrings, independence from torch."""

import ast
import inspect
import pathlib

import pytest

import oracle

ORACLE_DIR = pathlib.Path(oracle.__file__).parent

# api.md: function -> (positional args, keywords with canonical defaults)
API = {
    "token_logprobs": (["logits", "input_ids", "mask"], {"temperature": 1.0}),
    "token_entropy": (["logits", "mask"], {"temperature": 1.0}),
    "token_logprobs_from_hidden": (["hidden", "weight", "input_ids", "mask"], {"temperature": 1.0}),
    "token_entropy_from_hidden": (["hidden", "weight", "mask"], {"temperature": 1.0}),
    "reinforce_advantages": (["rewards"], {"baseline": "none"}),
    "rloo_advantages": (["rewards", "group_size"], {"singleton": "zero"}),
    "grpo_advantages": (["rewards", "group_size"], {"scale": "group", "std_ddof": 1, "eps": 1e-6, "singleton": "zero"}),
    "rlhf_token_rewards": (["scores", "logp", "ref_logp", "mask"], {"kl_coef": inspect.Parameter.empty,
                                                                    "estimator": "k1"}),
    "gae": (["token_rewards", "values", "mask"], {"gamma": 1.0, "lam": 1.0}),
    "whiten": (["x", "mask"], {"shift_mean": True, "std_ddof": 1, "eps": 1e-8}),
    "kl_penalty": (["logp", "ref_logp", "mask"], {"estimator": "k1", "log_ratio_clamp": None, "clamp": None}),
    "pg_token_loss": (["logp", "advantages", "mask"], {}),
    "ppo_token_loss": (["logp", "old_logp", "advantages", "mask"],
                       {"eps_low": 0.2, "eps_high": 0.2, "dual_clip": None, "log_ratio_clamp": None}),
    "gspo_token_loss": (["logp", "old_logp", "advantages", "mask"], {"eps_low": 3e-4, "eps_high": 4e-4,
                                                                     "form": "sequence"}),
    "cispo_token_loss": (["logp", "old_logp", "advantages", "mask"], {"eps_low": None, "eps_high": 0.28,
                                                                      "bound": "relative", "surrogate": "logp"}),
    "value_token_loss": (["values", "old_values", "returns", "mask"], {"clip": None}),
    "aggregate": (["token_loss", "mask"], {"mode": inspect.Parameter.empty, "norm_length": None,
                                           "num_tokens": None, "num_seqs": None}),
    # spec v1.1: advantage estimators
    "reinforce_pp_advantages": (["token_rewards", "mask"], {"gamma": 1.0, "gap": "skip", "std_ddof": 1, "eps": 1e-8}),
    "reinforce_pp_baseline_advantages": (["rewards", "group_size", "mask"],
                                         {"level": "token", "std_ddof": 1, "eps": 1e-8, "singleton": "zero"}),
    "remax_advantages": (["rewards", "greedy_rewards", "group_size"], {}),
    "opo_advantages": (["rewards", "group_size", "mask"], {"singleton": "zero"}),
    "grpo_passk_advantages": (["rewards", "group_size"], {"scale": "group", "std_ddof": 1, "eps": 1e-6}),
    "gdpo_advantages": (["rewards", "group_size"], {"reward_weights": None, "std_ddof": 1, "eps": 1e-6,
                                                    "batch_normalize": True, "singleton": "zero"}),
    "maxrl_advantages": (["rewards", "group_size"], {"eps": 1e-6, "singleton": "zero"}),
    "gpg_advantages": (["rewards", "group_size"], {"singleton": "zero"}),
    "optimal_token_baseline_advantages": (["token_rewards", "mask", "group_size", "old_logp", "sum_pi_squared", "is_weights"],
                                          {"align": "position", "zero_tail": True, "tail_length": "extent", "eps": 0.0}),
}
WITH_GRAD = ["token_logprobs", "token_entropy", "token_logprobs_from_hidden", "token_entropy_from_hidden",
             "kl_penalty", "pg_token_loss", "ppo_token_loss", "gspo_token_loss", "cispo_token_loss",
             "value_token_loss", "aggregate"]


def _split(fn):
    params = inspect.signature(fn).parameters.values()
    positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keywords = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return positional, keywords


@pytest.mark.parametrize("name", sorted(API))
def test_signature_matches_api(name):
    assert name in oracle.__all__
    assert _split(getattr(oracle, name)) == API[name]


@pytest.mark.parametrize("name", WITH_GRAD)
def test_grad_signature_is_args_then_upstream_then_same_keywords(name):
    grad_name = f"{name}_grad"
    assert grad_name in oracle.__all__
    positional, keywords = API[name]
    assert _split(getattr(oracle, grad_name)) == (positional + ["upstream"], keywords)


def test_every_public_function_has_a_spec_docstring():
    for name in oracle.__all__:
        obj = getattr(oracle, name)
        if callable(obj):
            doc = inspect.getdoc(obj) or ""
            assert "Spec: " in doc and "(v1)" in doc, name


def test_oracle_imports_numpy_only():
    allowed = {"numpy", "math", "numbers", "typing", "__future__", "oracle"}
    for path in ORACLE_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {roots - allowed}"
