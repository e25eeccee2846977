"""``rlspec train --model DIR --prompts FILE.jsonl --reward SPEC``: a local model folder (built here: a BPE
tokenizer trained on a small corpus, a random-weight Llama over it) trained on a prompts file with a reward
function. What the batch holds is checked against the tokenizer and the reward function applied by hand to the
decoded completions, never against the trainer's own outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from conformance.cli import main as cli_main
from conformance.trainer_verify import TrainerVerifier
from refimpl.trainer import TrainConfig, Trainer
from refimpl.trainer.prompt_file import PromptFileTask, load_reward, resolve_reward_spec
from tests.e2e.own_model import write_model

ROWS = [{"prompt": "the cat sat on", "target": "the", "bonus": 0.0},
        {"prompt": "one two three", "target": "four", "bonus": 0.1},
        {"messages": [{"role": "user", "content": "say yes"}], "target": "yes", "bonus": 0.2},
        {"prompt": "red", "target": "blue", "bonus": 0.3}, {"prompt": "hello world, hello", "target": "world", "bonus": 0.4}]
REWARD_SOURCE = '''
def reward(prompts, completions, completion_ids, target, bonus, **columns):
    return [1.0 if t in c else b + len(ids) / 100 for c, ids, t, b in zip(completions, completion_ids, target, bonus)]
'''


def by_hand(completion: str, ids: list[int], row: dict) -> float:
    """REWARD_SOURCE's rule, written again."""
    return 1.0 if row["target"] in completion else row["bonus"] + len(ids) / 100


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("own")
    write_model(root / "model")
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (root / "my_reward.py").write_text(REWARD_SOURCE)
    return {"root": root, "model": root / "model", "prompts": root / "prompts.jsonl",
            "reward": f"{root / 'my_reward.py'}:reward"}


@pytest.fixture(scope="module")
def tokenizer(world):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(world["model"]))


def config(world, **kw) -> TrainConfig:
    base = dict(model=str(world["model"]), prompts=str(world["prompts"]), reward=world["reward"], prompts_per_step=4,
                group_size=2, max_new_tokens=6, checkpoint_every=0, steps=2)
    return TrainConfig(**{**base, **kw})


def test_prompts_are_the_tokenizers_ids_and_chats_use_the_template(world, tokenizer):
    task = PromptFileTask(str(world["prompts"]), tokenizer, load_reward(world["reward"]))
    assert task.prompt_ids(0) == tokenizer("the cat sat on")["input_ids"]
    chat = tokenizer.apply_chat_template(ROWS[2]["messages"], add_generation_prompt=True, tokenize=False)
    assert chat.endswith("<assistant>")
    assert task.prompt_ids(2) == tokenizer(chat, add_special_tokens=False)["input_ids"]
    assert task.prompt_width == max(len(task.prompt_ids(i)) for i in range(len(ROWS)))
    assert (task.eos_id, task.pad_id) == (tokenizer.eos_token_id, tokenizer.pad_token_id)


def test_each_pass_over_the_file_is_a_seeded_shuffle(world, tokenizer):
    task = PromptFileTask(str(world["prompts"]), tokenizer, load_reward(world["reward"]), seed=3)
    rng = np.random.default_rng(0)
    order = [p for step in range(5) for p in task.sample_prompts(4, rng, step)]  # 20 rows = 4 passes of 5
    for k in range(4):
        assert sorted(order[5 * k:5 * k + 5]) == list(range(5))
    assert order == [p for step in range(5) for p in task.sample_prompts(4, np.random.default_rng(9), step)]
    other = PromptFileTask(str(world["prompts"]), tokenizer, load_reward(world["reward"]), seed=4)
    assert order != [p for step in range(5) for p in other.sample_prompts(4, rng, step)]


def test_the_reward_gets_trls_arguments(world, tokenizer):
    seen = {}

    def reward(prompts, completions, completion_ids, **columns):
        seen.update(prompts=prompts, completions=completions, completion_ids=completion_ids, columns=columns)
        return [0.5, 1.0]

    task = PromptFileTask(str(world["prompts"]), tokenizer, reward)
    ids = tokenizer("yes")["input_ids"]
    rewards, solved = task.score_batch([2, 0], [ids + [task.eos_id], ids])
    assert rewards == [0.5, 1.0] and solved == [False, True]
    assert seen["prompts"] == [ROWS[2]["messages"], "the cat sat on"]
    assert seen["completions"] == ["yes", "yes"]
    assert seen["completion_ids"] == [ids + [task.eos_id], ids]
    assert seen["columns"] == {"bonus": [0.2, 0.0], "target": ["yes", "the"]}


class RolloutHook(TrainerVerifier):
    """--verify's checks, keeping each step's rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.rollouts = []

    def __call__(self, rec):
        if rec.rollout is not None:
            self.rollouts.append((rec.step, rec.rollout, rec.prompt_width))
        super().__call__(rec)


def assert_rollouts_come_from_the_file_and_the_reward(hook, world, tokenizer, group_size=2):
    task = PromptFileTask(str(world["prompts"]), tokenizer, load_reward(world["reward"]), seed=0)
    assert hook.rollouts
    for step, ro, P in hook.rollouts:
        prompts = task.sample_prompts(4, np.random.default_rng(0), step)
        for i in range(ro.input_ids.shape[0]):
            expected_prompt = task.prompt_ids(prompts[i // group_size])
            ids = ro.input_ids[i].tolist()
            assert ids[P - len(expected_prompt):P] == expected_prompt
            assert all(t == tokenizer.pad_token_id for t in ids[:P - len(expected_prompt)])
            comp = [t for t, m in zip(ids, ro.mask[i].tolist()) if m]
            text = tokenizer.decode(comp, skip_special_tokens=True)
            expected = by_hand(text, comp, ROWS[prompts[i // group_size]])
            assert math.isclose(float(ro.rewards_global[i]), expected, abs_tol=1e-6)


def test_a_run_trains_on_the_files_prompts_with_the_reward(world, tokenizer):
    hook = RolloutHook()
    trainer = Trainer(config(world), on_step=hook)
    trainer.train()
    assert hook.updates == 2 * trainer.cfg.num_minibatches and not hook.failures
    assert_rollouts_come_from_the_file_and_the_reward(hook, world, tokenizer)


def test_cli_runs_a_local_model_and_the_module_spec_is_found_in_the_current_directory(world, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(world["root"])
    code = cli_main(["train", "--model", "model", "--prompts", "prompts.jsonl", "--reward", "my_reward:reward",
                     "--steps", "2", "--prompts-per-step", "4", "--group-size", "2", "--max-new-tokens", "6",
                     "--verify", "--no-progress", "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 fail, 0 error" in out
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())["config"]
    assert saved["reward"] == f"{world['root'] / 'my_reward.py'}:reward"  # absolute: rollout actors find it too
    assert saved["model"] == str(world["model"])


def test_resolve_reward_spec(tmp_path):
    (tmp_path / "mod.py").write_text("def f(**kw): return []\n")
    assert resolve_reward_spec("mod:f", cwd=tmp_path) == f"{tmp_path / 'mod.py'}:f"
    assert resolve_reward_spec("sub/x.py:g", cwd=tmp_path) == f"{tmp_path / 'sub' / 'x.py'}:g"
    assert resolve_reward_spec("json:dumps", cwd=tmp_path) == "json:dumps"  # importable, not a local file


@pytest.mark.parametrize("kw, message", [
    (dict(prompts=None), "prompts: needed with model, reward"),
    (dict(model=None, reward=None), "model, reward: needed with prompts"),
    (dict(model="/nonexistent/model"), "model: no folder /nonexistent/model"),
    (dict(prompts="/nonexistent.jsonl"), "prompts: no file /nonexistent.jsonl"),
    (dict(reward="no_colon"), "reward: expected 'module:function'"),
])
def test_config_errors_name_the_field(world, kw, message):
    with pytest.raises(ValueError, match=f"TrainConfig: {message}"):
        config(world, **kw).resolved()


@pytest.mark.parametrize("spec, message", [
    ("json:no_such_function", "json has no function 'no_such_function'"),
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
    ("/nonexistent/r.py:f", "no file /nonexistent/r.py"),
])
def test_reward_spec_errors(spec, message):
    with pytest.raises(ValueError, match=f"TrainConfig: reward: .*{message}"):
        load_reward(spec)


@pytest.mark.parametrize("lines, message", [
    (["{not json"], "line 1: not JSON"),
    (['{"prompt": "a"}', '{"text": "b"}'], 'line 2: expected an object with exactly one of "prompt"'),
    (['{"prompt": "a", "messages": []}'], "line 1: expected an object with exactly one of"),
    (['{"prompt": 3}'], 'line 1: "prompt": expected text, got int'),
    (["", "  "], "holds no prompt"),
])
def test_prompt_file_errors_name_the_line(world, tokenizer, tmp_path, lines, message):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"TrainConfig: prompts: .*{message}"):
        PromptFileTask(str(path), tokenizer, load_reward(world["reward"]))


@pytest.mark.parametrize("returned, message", [
    ([1.0], "returned 1 rewards for 2 completions"),
    ([1.0, float("nan")], "reward nan \\(not finite\\) for completion 1"),
    (None, "expected a list of 2 numbers, got None"),
])
def test_a_bad_reward_is_an_error_naming_the_function(world, tokenizer, returned, message):
    def my_reward(**kw):
        return returned

    task = PromptFileTask(str(world["prompts"]), tokenizer, my_reward)
    with pytest.raises(ValueError, match=f"reward function .*my_reward: {message}"):
        task.score_batch([0, 1], [[5], [6]])


def test_a_model_shorter_than_prompt_plus_budget_is_refused(world):
    with pytest.raises(ValueError, match="TrainConfig: model: .* max_position_embeddings 128, fewer than"):
        Trainer(config(world, max_new_tokens=200))


def test_the_async_trainer_rebuilds_the_task_in_its_actors(world, tokenizer):
    pytest.importorskip("ray")
    from refimpl.trainer.async_trainer import AsyncTrainer

    hook = RolloutHook()
    AsyncTrainer(config(world, asynchronous=True), on_step=hook).train()
    assert hook.updates and not hook.failures
    assert_rollouts_come_from_the_file_and_the_reward(hook, world, tokenizer)


def test_engine_vllm_refuses_a_model_whose_head_size_its_cpu_attention_lacks(world):
    # write_model's default: hidden 32 over 2 heads, head size 16 (vLLM's CPU attention starts at 32)
    with pytest.raises(ValueError, match=r"TrainConfig: model: engine 'vllm' needs a head size .* has 16"):
        config(world, asynchronous=True, engine="vllm").resolved()


def test_a_model_with_tied_embeddings_checkpoints_and_resumes(world, tmp_path):
    """safetensors refuses tensors that share memory: the tied LM head / embedding must still checkpoint, and the
    resumed run keeps the tie and continues from the saved weights."""
    from refimpl.trainer.checkpoint import load_checkpoint

    tied = write_model(tmp_path / "tied", tied=True)
    cfg = config(world, model=str(tied), steps=2, checkpoint_every=1, out_dir=str(tmp_path / "run"))
    trainer = Trainer(cfg)
    trainer.train()
    saved = load_checkpoint(str(tmp_path / "run"))["model"]
    state = trainer.policy.state_dict()
    assert torch.equal(saved["lm.lm_head.weight"], state["lm.model.embed_tokens.weight"])
    resumed = Trainer.resume(str(tmp_path / "run"), overrides={"steps": 3})
    lm = resumed.policy.lm
    assert lm.lm_head.weight.data_ptr() == lm.model.embed_tokens.weight.data_ptr()
    assert torch.equal(lm.lm_head.weight, state["lm.model.embed_tokens.weight"])
    resumed.train()
    assert resumed.step == 3
