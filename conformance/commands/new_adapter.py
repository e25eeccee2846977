"""`rlspec new-adapter NAME`: write a skeleton adapter for a framework, and a pytest file that checks it.

Why generate it: an adapter has a dozen optional attributes and up to 19 functions whose positional
arguments, keywords and canonical defaults the spec fixes; a skeleton built from the registry and the
oracle's signatures starts every adapter with all of them right, and follows the spec as it grows.
The protocol it follows is `conformance/spec/v1/api.md`, "Adapter protocol (v2)".
"""

from __future__ import annotations

import argparse
import inspect
import re
import shlex
import sys
import textwrap
from pathlib import Path
from string import Template

from conformance import SPEC_VERSION, SUITE_VERSION, spec
from conformance.runner.protocol import DEFAULT_DTYPES
from conformance.records import RECORDS, Quantity

WIDTH = 100

HEADER = Template('''\
"""rlspec adapter for ${name}, written by `rlspec new-adapter` (rlspec ${suite}, spec ${spec}).

Fill in the functions the framework computes, converting between the spec's arrays and its own;
the others may keep raising NotImplementedError (reported "not implemented", never as a pass) or
go. Check it with

    PYTHONPATH=. rlspec check --adapter ${module}:Adapter
    pytest test_${ident}_rlspec.py

Every attribute below and what each function is passed: rlspec's conformance/spec/v1/api.md,
"Adapter protocol (v2)". The equation, gradient and edge cases of a quantity:
`rlspec explain <spec id>`.
"""

# Array conventions of spec ${spec}: every method receives and returns these (convert inside it).
# - mask [B, T] bool: True on trained completion tokens (EOS included; prompt and padding
#   excluded); mask[:, 0] is always False.
# - Token alignment: every per-token array is [B, T] and position t is about input_ids[:, t],
#   predicted by logits[:, t-1].
# - Masked positions are exactly 0 in every output; whatever masked inputs hold (NaN, +-inf, 1e30,
#   ids of -100) never reaches a valid output or gradient.
# - Groups (grpo_advantages, rloo_advantages) are contiguous blocks of group_size rows.
# - Output dtype = input dtype (float32 is accepted for bfloat16 inputs); compute in float32 or
#   wider.
# - Inputs are fresh copies: never modify them in place (that fails the row).
# - Keywords: a function is passed only the keywords its docstring names (and, with
#   accepts_variants = True, each preset's); it computes every other keyword at the canonical
#   default of its signature.
${gradients}
# - A function raising NotImplementedError for a case (a keyword value the framework lacks) makes
#   that case "not implemented"; the rest of the row is still checked.
''')

GRADIENTS = {
    "torch": "Gradients: by autograd through the returned tensors; detach what the spec makes a constant "
    "(advantages, returns, CISPO's clipped weight).",
    "numpy": "Gradients: the optional <function>_grad methods (hints below each function), given upstream = "
    "dL/d(output) shaped like the output (a float for a scalar); without one a row compares values only.",
}

TEST = Template('''\
"""rlspec conformance of ${name}, written by `rlspec new-adapter`.

`rlspec check` loads the adapter beside this file and finds no FAIL and no error. Functions still
raising NotImplementedError are "not implemented", which does not fail the check once at least one
function is implemented: a skeleton with none checks nothing, a broken run (exit 2), so this test
fails until the first function is written.
"""

import json
import subprocess
import sys
from pathlib import Path


def test_${ident}_conforms_to_rlspec(tmp_path):
    report = tmp_path / "rlspec.json"
    # `python -m` puts its working directory first on sys.path: the adapter module imports from it
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "check", "--no-progress", "--json", str(report),
         "--adapter", "${module}:Adapter"],
        cwd=Path(__file__).resolve().parent, capture_output=True, text=True,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    # an adapter that cannot be loaded already exits 2 (above); this also asks that it was the one loaded
    assert [a["status"] for a in json.loads(report.read_text())["adapters"]] == ["ok"], output
''')


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("new-adapter", help="write a skeleton adapter and a pytest file that checks it")
    p.add_argument("name", help="the framework's name, shown in the reports (the file names use it as an identifier)")
    p.add_argument("--dir", type=Path, default=Path("."), help="where to write the two files (default: .)")
    p.add_argument("--array-api", choices=sorted(DEFAULT_DTYPES), default="torch",
                   help="torch: called with tensors, autograd gradients; numpy: NumPy arrays, <function>_grad")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=run)


def identifier(name: str) -> str:
    """NAME as a Python identifier for the file names: lower case, each run of other characters one
    underscore, an underscore before a leading digit; empty when NAME has no letter or digit."""
    ident = re.sub(r"\W+", "_", name.lower()).strip("_")
    return f"_{ident}" if ident[:1].isdigit() else ident


def run(args: argparse.Namespace) -> int:
    ident = identifier(args.name)
    if not ident:
        print(f"rlspec new-adapter: {args.name!r} has no letter or digit to name the files by", file=sys.stderr)
        return 2
    module = f"{ident}_rlspec_adapter"
    paths = {args.dir / f"{module}.py": adapter_source(args.name, ident, args.array_api),
             args.dir / f"test_{ident}_rlspec.py": TEST.substitute(name=args.name, ident=ident, module=module)}
    existing = [str(p) for p in paths if p.exists()]
    if existing and not args.force:
        print(f"rlspec new-adapter: not overwriting {', '.join(existing)} (use --force)", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    for path, text in paths.items():
        path.write_text(text)
        print(f"wrote {path}")
    print(f"next: PYTHONPATH={shlex.quote(str(args.dir))} rlspec check --adapter {module}:Adapter")
    return 0


def adapter_source(name: str, ident: str, array_api: str) -> str:
    """The adapter module: conventions, the attributes at their defaults, one stub per spec function."""
    gradients = _comment(f"- {GRADIENTS[array_api]}", "", hang="  ").rstrip("\n")
    header = HEADER.substitute(name=name, ident=ident, module=f"{ident}_rlspec_adapter", suite=SUITE_VERSION,
                               spec=SPEC_VERSION, gradients=gradients)
    body = [f"\n\nclass Adapter:\n    \"\"\"{name} as rlspec calls it.\"\"\"\n\n"]
    for comment, assignment in _attributes(name, array_api):
        body.append(_comment(comment, "    ") + f"    {assignment}\n")
    for record in RECORDS:
        body.append("\n" + _stub(record, array_api))
    return header + "".join(body)


def _attributes(name: str, array_api: str) -> list[tuple[str, str]]:
    """(comment, assignment) of every attribute the runner reads, at the runner's default."""
    attributes = [
        ("Required. Shown in the reports (row ids are <function>@<name>).", f"name = {name!r}"),
        ("Required. The version of what is checked, recorded in the reports.", "version = '0.0.0'"),
        ("Required. The spec these functions follow.", f"spec_version = {SPEC_VERSION!r}"),
        ("Required. 'torch': called with torch tensors, gradients by autograd; 'numpy': called with NumPy "
         "arrays, gradients through <function>_grad.", f"array_api = {array_api!r}"),
        ("Input dtypes to check (drop those the framework does not run in); or per function, e.g. "
         "{'gae': ('float64',), '*': ('float64', 'float32')}.",
         f"dtypes = {DEFAULT_DTYPES[array_api]!r}"),
        ("False: values only (no gradient comparison, no invariant:detached check); or per function, e.g. "
         "{'ppo_clipped_mask': False} for a metric computed without gradient.", "supports_grad = True"),
        ("True: every spec keyword is accepted, so each preset's keywords are also checked (preset:<name>).",
         "accepts_variants = False"),
        ("function -> {keyword: values not supported, or a predicate value -> True when not supported}, e.g. "
         "{'grpo_advantages': {'scale': ('batch',)}, 'policy_loss': {'kl_coef': lambda c: c != 0}}: those "
         "cases are not called and are reported \"not implemented (scale='batch')\"; the rest of the row is "
         "checked.", "unsupported_kwargs: dict[str, dict] = {}"),
        ("function -> a short reason printed with its precision findings, e.g. {'token_logprobs': 'softmax in "
         "bfloat16'}.", "precision_notes: dict[str, str] = {}"),
        ("Replace by a method micro_batched_loss(self, token_loss_chunks, mask_chunks, *, mode, "
         "norm_length=None, dp_world_size=1) -> one scalar loss per chunk, as the framework computes it per "
         "micro-batch, to get the agg.partition[<mode>] rows checked (contract: conformance/runner/partition.py).",
         "micro_batched_loss = None"),
    ]
    if array_api == "numpy":
        attributes.append(("Replace by micro_batched_loss_grad(self, token_loss_chunks, mask_chunks, upstream, "
                           "*, <same keywords>) -> dL/d token_loss_chunks[i] for L = upstream * sum of the "
                           "losses (None: values only).", "micro_batched_loss_grad = None"))
    attributes.append(("Replace by a method extra_rows(self, seed) -> list[conformance.runner.verdict.RowResult] to add "
                       "framework-specific rows to the report (see framework_rows in "
                       "conformance/runner/parts.py).", "extra_rows = None"))
    return attributes


def _stub(record: Quantity, array_api: str) -> str:
    """One documented method raising NotImplementedError, with the oracle's exact signature (and for
    a NumPy adapter, the commented signature of its gradient)."""
    shapes = re.search(r"^Shapes: (.*)$", inspect.getdoc(record.oracle) or "", re.M)
    passed = ", ".join(record.question) or "none"
    if record.partition_keywords:
        passed += f" (and {', '.join(record.partition_keywords)} in the invariant:partition check)"
    canonical = ", ".join(f"{k}={v!r}" for k, v in record.canonical_keywords().items()) or "none"
    paragraphs = [
        f"{record.spec_id}: {spec.description(record.spec_id)}",
        f"Oracle shapes: {shapes.group(1) if shapes else '-'} Return the input dtype, not float64.",
        f"Keywords passed: {passed}. Never passed, so computed at these canonical values: {canonical}.",
        f"Equation, gradient, edge cases: `rlspec explain {record.spec_id}`.",
    ]
    doc = "\n\n".join(
        textwrap.fill(p, WIDTH, initial_indent=" " * 8 + ('"""' if i == 0 else ""), subsequent_indent=" " * 8,
                      break_on_hyphens=False)
        for i, p in enumerate(paragraphs)
    )
    text = _def(record.function, inspect.signature(record.oracle))
    text += f'{doc}\n        """\n        raise NotImplementedError({record.function!r})\n'
    if array_api == "numpy" and record.oracle_grad is not None:
        wrt = ", ".join(f"dL/d {a}" for a in record.grad_args)
        hint = (f"Optional: {wrt if len(record.grad_args) == 1 else f'({wrt})'} for L = sum(upstream * "
                f"{record.function}(...)), as oracle.{record.function}_grad computes it.")
        grad = _def(f"{record.function}_grad", inspect.signature(record.oracle_grad))
        text += "\n" + _comment(hint, "    ") + "".join(f"    # {line[4:]}\n" for line in grad.splitlines())
        text += "    #     raise NotImplementedError\n"
    return text


def _def(name: str, signature: inspect.Signature) -> str:
    """`def name(self, ...):` in a class body; one parameter a line when it does not fit in WIDTH."""
    params = ["self"]
    for p in signature.parameters.values():
        if p.kind is p.KEYWORD_ONLY and "*" not in params:
            params.append("*")
        params.append(str(p))
    line = f"    def {name}({', '.join(params)}):\n"
    if len(line) <= WIDTH + 1:
        return line
    return f"    def {name}(\n" + "".join(f"        {p},\n" for p in params) + "    ):\n"


def _comment(text: str, indent: str, hang: str = "") -> str:
    """`text` as `#` comment lines of at most WIDTH columns; continuation lines indented by `hang`."""
    return textwrap.fill(text, WIDTH, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# {hang}",
                         break_on_hyphens=False) + "\n"
