"""Access to the spec text: sections by spec id, their titles and one-line descriptions."""

from __future__ import annotations

from pathlib import Path

from conformance import SPEC_VERSION

SPEC_DIR = Path(__file__).parent / SPEC_VERSION


def section_path(spec_id: str) -> Path:
    """The file holding a spec id's section (`agg.token_mean` lives in `agg.md`, `trace.grad` in `trace.md`)."""
    path = SPEC_DIR / f"{spec_id}.md"
    if not path.exists() and spec_id.startswith("agg."):
        path = SPEC_DIR / "agg.md"
    if not path.exists() and spec_id.startswith("trace."):  # the training-step links, one section each in trace.md
        path = SPEC_DIR / "trace.md"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in SPEC_DIR.glob("*.*.md")) + ["agg.*", "trace.*"])
        raise KeyError(f"unknown spec id {spec_id!r}; known: {known}")
    return path


def section(spec_id: str) -> str:
    return section_path(spec_id).read_text()


def title(spec_id: str) -> str:
    """The section's title: its `# <spec-id> — <title>` line without the spec id."""
    first = next(line for line in section(spec_id).splitlines() if line.startswith("# "))
    return first[2:].split(" — ", 1)[-1].strip()


def description(spec_id: str) -> str:
    """The one-line description: the first non-empty line after the `# ` title."""
    lines = section(spec_id).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# "):
            for rest in lines[i + 1 :]:
                if rest.strip():
                    return rest.strip()
    return ""
