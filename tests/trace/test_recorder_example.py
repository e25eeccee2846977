"""The recorder example of docs/replay.md runs as written, its trace replays clean, and the same example with
its loss divided by the accumulation steps once more FAILs with the factor named."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.trace.replay import replay

DOC = Path(__file__).resolve().parents[2] / "docs" / "replay.md"
CODE = re.search(r"<!-- example: recorder -->\n```python\n(.*?)```", DOC.read_text(), re.S).group(1)


def _run(code: str, trace: Path) -> dict:
    exec(compile(code, "docs/replay.md", "exec"), {"TRACE_DIR": str(trace)})
    return {r.function: r for r in replay(str(trace))[1]}


def test_example_replays_clean(tmp_path):
    rows = _run(CODE, tmp_path / "t")
    checked = {f: r.status for f, r in rows.items() if r.status != "not_implemented"}
    assert checked == {f: "pass" for f in ("trace.mask", "trace.logp", "trace.advantages", "trace.grad", "trace.loss",
                                           "trace.probe")}, checked
    assert len(CODE.strip().splitlines()) <= 40


def test_example_divided_twice_is_named(tmp_path):
    code = CODE.replace("    loss.backward()", "    loss = loss / M\n    loss.backward()")
    assert code != CODE
    row = _run(code, tmp_path / "t")["trace.grad"]
    assert row.status == "fail"
    assert "token_mean over the step's global counts; x1/2 (1/the accumulation steps M)" in row.consistent_with
