"""`rlspec frameworks`: build and inspect the isolated environments of the frameworks under test that
cannot share rlspec's own (every folder of ``conformance/frameworks/`` with an install recipe).

    rlspec frameworks install [NAME|all] [--force] [--jobs N]
    rlspec frameworks status

One virtual environment per framework under ``$RLSPEC_FRAMEWORKS_DIR`` (default
``~/.cache/rlspec/frameworks``), built with this interpreter's ``venv`` and pip from the recipes shipped
in each framework's folder ``conformance/frameworks/<name>/`` (``requirements.txt`` with dependencies,
then, where present, ``nodeps.txt`` with ``--no-deps``, then ``pip uninstall`` of ``uninstall.txt``). pip is the ordinary client, with its usual configuration
(``pip.conf``, ``PIP_*`` variables); ``$RLSPEC_FRAMEWORKS_PIP_ARGS`` adds arguments to every pip call
(e.g. an index for a CPU build of torch). The adapters find the environments there
(``conformance/frameworks/subprocess_worker.py``); see ``conformance/frameworks/README.md``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from conformance.frameworks.subprocess_worker import FRAMEWORKS, FrameworkUnavailable, Worker, env_python, frameworks_dir, python_for

FRAMEWORKS_HOME = Path(__file__).resolve().parent.parent / "frameworks"  # one folder per framework


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "frameworks",
        help="install / inspect the isolated environments of the frameworks under test",
        description=f"Build the virtual environments in which the adapters of {', '.join(FRAMEWORKS)} run "
        f"(under $RLSPEC_FRAMEWORKS_DIR, now {frameworks_dir()}).",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    inst = sub.add_parser("install", help="create the environment(s) and install the framework(s)")
    inst.add_argument("which", nargs="?", default="all", choices=(*FRAMEWORKS, "all"))
    inst.add_argument("--force", action="store_true", help="delete an existing environment first")
    inst.add_argument("--jobs", type=int, default=1, metavar="N",
                      help="install N environments at once (each one's pip output goes to <env>.install.log; "
                      "a failed one prints its log's tail); default 1, output to the terminal")
    inst.set_defaults(func=install)
    st = sub.add_parser("status", help="where each framework's environment is and what it imports")
    st.set_defaults(func=status)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _pip(python: Path, *args: str) -> list[str]:
    extra = shlex.split(os.environ.get("RLSPEC_FRAMEWORKS_PIP_ARGS", ""))
    return [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args, *extra]


def _run(cmd: list[str], log: TextIO | None) -> int:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=log or sys.stdout, flush=True)
    return subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT if log else None)


def install_one(name: str, *, force: bool = False, log: TextIO | None = None) -> int:
    """Build ``name``'s environment; pip's output to ``log`` (the terminal when None)."""
    root = frameworks_dir() / name
    python = env_python(name)
    t0 = time.perf_counter()
    if force and root.exists():
        shutil.rmtree(root)
    if not python.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        if _run([sys.executable, "-m", "venv", str(root)], log):
            print(f"rlspec frameworks: could not create {root}", file=sys.stderr)
            return 1
    home = FRAMEWORKS_HOME / name
    steps = [_pip(python, "-r", str(home / "requirements.txt"))]
    if (home / "nodeps.txt").exists():
        steps.append(_pip(python, "--no-deps", "-r", str(home / "nodeps.txt")))
    if (home / "uninstall.txt").exists():  # packages pip brings that break the environment (vllm)
        steps.append([str(python), "-m", "pip", "uninstall", "--disable-pip-version-check", "-y", "-r",
                      str(home / "uninstall.txt")])
    for cmd in steps:
        if _run(cmd, log):
            print(f"rlspec frameworks: pip failed for {name}; the environment is left at {root}", file=sys.stderr)
            return 1
    try:
        worker = Worker(name)
    except FrameworkUnavailable as exc:
        print(f"rlspec frameworks: {name} installed but does not import: {exc}", file=sys.stderr)
        return 1
    try:
        stubs = worker.hello.get("info", {}).get("stubs") or []
        print(f"{name} {worker.version} ready in {root} ({time.perf_counter() - t0:.0f}s; torch {worker.hello.get('torch')}"
              + (f"; import stubs: {', '.join(stubs)}" if stubs else "") + ")")
    finally:
        worker.close()
    return 0


def _install_logged(name: str, force: bool) -> int:
    path = frameworks_dir() / f"{name}.install.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as log:
        rc = install_one(name, force=force, log=log)
    if rc:
        tail = path.read_text().splitlines()[-30:]
        print(f"rlspec frameworks: {name} failed; the last lines of {path}:\n" + "\n".join(tail), file=sys.stderr)
    return rc


def install(args: argparse.Namespace) -> int:
    """Every named environment is attempted; the exit status is 1 if any failed (the others are usable:
    a framework without an environment is a "not installed" column with its reason)."""
    names = FRAMEWORKS if args.which == "all" else (args.which,)
    if args.jobs <= 1:
        codes = [install_one(n, force=args.force) for n in names]
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            codes = list(pool.map(lambda n: _install_logged(n, args.force), names))
    failed = [n for n, rc in zip(names, codes) if rc]
    if failed:
        print(f"rlspec frameworks: not installed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def status(args: argparse.Namespace) -> int:
    print(f"environments: {frameworks_dir()} (RLSPEC_FRAMEWORKS_DIR)")
    for name in FRAMEWORKS:
        python, origin = python_for(name)
        if python is None:
            print(f"  {name}: not installed (rlspec frameworks install {name})")
            continue
        try:
            worker = Worker(name)
        except FrameworkUnavailable as exc:
            print(f"  {name}: {origin}: does not import: {exc}")
            continue
        try:
            h = worker.hello
            print(f"  {name} {worker.version}: {origin} (python {h.get('python')}, torch {h.get('torch')})")
        finally:
            worker.close()
    return 0
