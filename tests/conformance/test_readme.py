"""The README stays true: generated tables are current, and its adapter example works as stated."""

from __future__ import annotations

import re
import sys
import types

from conformance import readme
from conformance.commands.check import run_report, selected_records


def test_generated_blocks_are_current():
    assert readme.stale_blocks(readme.README.read_text()) == [], "run `rlspec readme --write`"


def test_the_adapter_example_behaves_as_the_readme_says(monkeypatch):
    text = readme.README.read_text()
    code = re.search(r"<!-- example: adapter -->\n```python\n(.*?)```", text, re.S).group(1)
    module = types.ModuleType("readme_example_adapter")
    exec(compile(code, "README-example", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "readme_example_adapter", module)
    rep = run_report(["readme_example_adapter:Adapter"], selected_records(["logprob.token", "adv.grpo"]),
                     seed=0, n_seeds=4, timeout=120, progress=False)
    rows = {r.function: r for r in rep.rows}
    assert rows["token_logprobs"].status == "pass", rows["token_logprobs"].message
    assert rows["grpo_advantages"].status == "preset" and rows["grpo_advantages"].matched_preset == "trl"
    assert "eps=0.0001" in rows["grpo_advantages"].message
