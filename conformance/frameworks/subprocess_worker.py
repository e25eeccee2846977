"""Run a framework's math in another Python interpreter: the client (used by the verl and OpenRLHF
adapters) and the worker (run inside the framework's isolated environment).

Why a second interpreter: verl 0.9.1 requires ``transformers<5.11`` and OpenRLHF 0.11.2 pins
``transformers==5.15.0``, while rlspec is tested with TRL 1.16 on transformers 5.24; one environment
cannot hold all three. ``rlspec frameworks install verl|openrlhf`` builds one virtual environment per
framework (``conformance/frameworks/README.md``); the adapters start this file there as a worker and
talk to it over its standard input and output.

Protocol (version 1): one JSON object per line in each direction, no pickle anywhere. NumPy arrays
travel as ``{"__ndarray__": <base64 of the .npy bytes>}`` and are read back with
``numpy.load(..., allow_pickle=False)``, so values and dtypes are exact; Python floats are written
with ``repr`` precision by ``json`` (exact round trip). A request is
``{"op": name, "arrays": {...}, "params": {...}, "wrt": [input names], "upstream": {output: array}}``;
the worker runs the op (framework conventions: the op modules in ``conformance/frameworks/<name>/ops.py``
call the installed framework and nothing else; what several of them share is ``shared_ops.py``, loaded
by path as well), and when ``wrt`` is given it backpropagates ``sum(output * upstream)`` through
autograd and returns d/d(input) for each named input. Its first line is a hello (framework version,
Python, torch, how the framework was imported) or the import error.

The worker's own stdout is moved to stderr before the framework is imported (frameworks print), so
the protocol stream carries nothing else. Only NumPy and the standard library are imported at module
level: the worker runs in an environment where rlspec itself is not installed.
"""

from __future__ import annotations

import atexit
import base64
import builtins
import collections
import hashlib
import importlib.util
import io
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

import numpy as np

PROTOCOL = 1
HERE = Path(__file__).resolve().parent
# The frameworks that run in an environment of their own: every framework folder beside this file
# with an install recipe (``<name>/requirements.txt``) and worker operations (``<name>/ops.py``).
FRAMEWORKS = tuple(sorted(p.parent.name for p in HERE.glob("*/requirements.txt") if (p.parent / "ops.py").exists()))

# ---------------------------------------------------------------------------------------------
# Encoding (both sides)
# ---------------------------------------------------------------------------------------------


def encode(obj: Any) -> Any:
    """JSON-ready form: arrays as base64 .npy, tuples as lists, NumPy scalars as Python numbers."""
    if isinstance(obj, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, obj if obj.flags.c_contiguous else obj.copy(order="C"), allow_pickle=False)  # keeps 0-d shapes
        return {"__ndarray__": base64.b64encode(buf.getvalue()).decode("ascii")}
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__ndarray__"}:
            return np.load(io.BytesIO(base64.b64decode(obj["__ndarray__"])), allow_pickle=False)
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


# ---------------------------------------------------------------------------------------------
# Worker side (runs inside the framework's environment)
# ---------------------------------------------------------------------------------------------


SHARED_OPS = "rlspec_shared_ops"  # ``shared_ops.py`` beside this file, as the frameworks' ops modules import it


def _load_path(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_ops(framework: str) -> Any:
    """``<framework>/ops.py``, loaded by path, after ``shared_ops.py`` (what several ops modules share) is
    registered as ``rlspec_shared_ops`` for it to import."""
    if SHARED_OPS not in sys.modules:
        sys.modules[SHARED_OPS] = _load_path(SHARED_OPS, HERE / "shared_ops.py")
    return _load_path(f"rlspec_{framework}_ops", HERE / framework / "ops.py")


def _to_numpy(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.cpu().numpy() if value.ndim else np.asarray(value.cpu().numpy())
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_numpy(v) for v in value]
    return value


def _run(ops: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    import torch

    fn = ops[request["op"]]
    wrt = list(request.get("wrt") or [])
    tensors: dict[str, Any] = {}
    for name, value in (request.get("arrays") or {}).items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            t = torch.from_numpy(np.array(value, copy=True))
            if name in wrt:
                t.requires_grad_(True)
            tensors[name] = t
        else:
            tensors[name] = value
    outputs = fn(tensors, **(request.get("params") or {}))
    grads: dict[str, Any] = {}
    if wrt:
        upstream = request.get("upstream") or {}
        total = None
        for out_name, up in upstream.items():
            out = outputs[out_name]
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                continue
            u = torch.as_tensor(np.asarray(up), dtype=out.dtype)
            term = (out * u).sum()
            total = term if total is None else total + term
        inputs = [tensors[n] for n in wrt]
        if total is None:
            found = [None] * len(inputs)
        else:
            found = torch.autograd.grad(total, inputs, allow_unused=True)
        for name, t, g in zip(wrt, inputs, found):
            grads[name] = np.zeros(t.shape, dtype=_to_numpy(t).dtype) if g is None else _to_numpy(g)
    return {"ok": True, "outputs": _to_numpy(outputs), "grads": grads}


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "ok": False,
        "error": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
    }


def serve(framework: str) -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # anything the framework prints goes to stderr, never into the protocol
    sys.stdout = sys.stderr

    def send(message: dict[str, Any]) -> None:
        proto.write(json.dumps(encode(message), allow_nan=True) + "\n")
        proto.flush()

    try:
        module = _load_ops(framework)
        loaded = module.load()  # imports the framework: {"version", "ops", "info"}
        import torch

        torch.set_num_threads(1)
        ops = loaded["ops"]
        send({"ok": True, "protocol": PROTOCOL, "framework": framework, "version": loaded["version"],
              "python": sys.version.split()[0], "executable": sys.executable, "torch": torch.__version__,
              "info": loaded.get("info", {}), "ops": sorted(ops)})
    except BaseException as exc:  # noqa: BLE001 - the hello carries the import error
        send(_error(exc))
        return 1
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = decode(json.loads(line))
            if request.get("op") == "__exit__":
                break
            send(_run(ops, request))
        except BaseException as exc:  # noqa: BLE001 - every failure is an answer, not a dead worker
            send(_error(exc))
    return 0


# ---------------------------------------------------------------------------------------------
# Client side (runs in rlspec's own interpreter)
# ---------------------------------------------------------------------------------------------


class FrameworkUnavailable(Exception):
    """The framework's environment is missing or the framework does not import there."""


class FrameworkError(RuntimeError):
    """An exception raised inside the framework that is not a built-in exception type."""


def frameworks_dir() -> Path:
    """Where ``rlspec frameworks install`` puts the environments (``$RLSPEC_FRAMEWORKS_DIR``, default
    ``~/.cache/rlspec/frameworks``); one virtual environment per framework below it."""
    root = os.environ.get("RLSPEC_FRAMEWORKS_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "rlspec" / "frameworks"


def env_python(framework: str) -> Path:
    return frameworks_dir() / framework / "bin" / "python"


def python_for(framework: str) -> tuple[str | None, str]:
    """The interpreter to run ``framework`` in, and where it came from: ``$RLSPEC_<NAME>_PYTHON``, else
    the environment ``rlspec frameworks install`` made, else this interpreter when the framework is
    importable here (e.g. ``pip install rlspec[verl]``), else None."""
    override = os.environ.get(f"RLSPEC_{framework.upper()}_PYTHON")
    if override:
        return override, f"${'RLSPEC_' + framework.upper() + '_PYTHON'}"
    venv = env_python(framework)
    if venv.exists():
        return str(venv), str(venv.parent.parent)
    if importlib.util.find_spec(_package(framework)) is not None:
        return sys.executable, "this interpreter"
    return None, ""


def _package(framework: str) -> str:
    """The import name of ``framework`` (``PACKAGE`` in its folder's ``__init__.py``, e.g. ``swift`` for
    ms_swift; the folder's name by default)."""
    try:
        return getattr(importlib.import_module(f"conformance.frameworks.{framework}"), "PACKAGE", framework)
    except ImportError:
        return framework


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"):
        env.pop(key, None)
    env["PYTHONNOUSERSITE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.setdefault("VERL_DISABLE_FLASH_ATTN_CE", "1")
    return env


class Worker:
    """One framework worker process; requests are serialised, answers cached (they are pure)."""

    START_TIMEOUT = 180.0
    CALL_TIMEOUT = 120.0
    CACHE_SIZE = 2048

    def __init__(self, framework: str) -> None:
        if framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {framework!r}; expected one of {FRAMEWORKS}")
        self.framework = framework
        python, origin = python_for(framework)
        if python is None:
            raise FrameworkUnavailable(
                f"no environment with {framework} (looked for {env_python(framework)}, "
                f"$RLSPEC_{framework.upper()}_PYTHON and this interpreter): run `rlspec frameworks install {framework}`"
            )
        self.python, self.origin = python, origin
        self._lock = threading.RLock()
        self._cache: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None
        self.hello: dict[str, Any] = {}
        self._start()
        atexit.register(self.close)

    # process management ---------------------------------------------------------------------

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+b", prefix=f"rlspec-{self.framework}-worker-")
        try:
            self._proc = subprocess.Popen(
                [self.python, "-u", str(Path(__file__).resolve()), self.framework],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                env=_worker_env(), cwd=tempfile.gettempdir(),
            )
        except OSError as exc:
            raise FrameworkUnavailable(f"cannot start {self.python}: {exc}") from exc
        try:
            hello = self._read(self.START_TIMEOUT)
        except (TimeoutError, EOFError) as exc:
            self.close()
            raise FrameworkUnavailable(f"the {self.framework} worker ({self.python}) did not start: {exc}; "
                                       f"stderr: {self.stderr_tail()}") from exc
        if not hello.get("ok"):
            self.close()
            raise FrameworkUnavailable(
                f"cannot import {self.framework} in {self.python}: {hello.get('error')}: {hello.get('message')}"
            )
        self.hello = hello

    def stderr_tail(self, n: int = 2000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - n))
            return self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no answer within {timeout:g}s")
        line = self._proc.stdout.readline()
        if not line:
            raise EOFError(f"the worker exited (code {self._proc.poll()})")
        return decode(json.loads(line))

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.write(b'{"op": "__exit__"}\n')
                proc.stdin.flush()
                proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    # calls ---------------------------------------------------------------------------------

    @property
    def version(self) -> str:
        return str(self.hello.get("version", "?"))

    def call(self, op: str, arrays: dict[str, Any] | None = None, params: dict[str, Any] | None = None, *,
             wrt: tuple[str, ...] | list[str] = (), upstream: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run ``op`` in the worker; returns ``{"outputs": {...}, "grads": {...}}`` (NumPy). An exception
        inside the framework is re-raised here as the same built-in type (``ValueError``, ...) or
        ``FrameworkError``, with the framework's message."""
        request = encode({"op": op, "arrays": arrays or {}, "params": params or {}, "wrt": list(wrt),
                          "upstream": upstream or {}})
        line = json.dumps(request, allow_nan=True, sort_keys=True)
        key = hashlib.sha256(line.encode()).hexdigest()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                answer = self._cache[key]
            else:
                answer = self._roundtrip(line)
                self._cache[key] = answer
                if len(self._cache) > self.CACHE_SIZE:
                    self._cache.popitem(last=False)
        if not answer.get("ok"):
            etype = answer.get("error", "Exception")
            cls = getattr(builtins, etype, None)
            if not (isinstance(cls, type) and issubclass(cls, Exception)) or etype in ("Exception", "BaseException"):
                cls = FrameworkError
            raise cls(f"[{self.framework} {self.version}] {etype}: {answer.get('message')}")
        return {"outputs": answer.get("outputs", {}), "grads": answer.get("grads", {})}

    def _roundtrip(self, line: str) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            self._start()  # a worker killed by a timeout (or that died) is restarted
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((line + "\n").encode())
            self._proc.stdin.flush()
            return self._read(self.CALL_TIMEOUT)
        except (TimeoutError, EOFError, OSError) as exc:
            tail = self.stderr_tail()
            self.close()
            raise FrameworkError(f"[{self.framework}] worker failed: {exc}; stderr: {tail}") from exc


_WORKERS: dict[str, Worker] = {}
_WORKERS_LOCK = threading.Lock()


def get_worker(framework: str) -> Worker:
    """The shared worker of ``framework`` (started on first use; raises ``FrameworkUnavailable``)."""
    with _WORKERS_LOCK:
        worker = _WORKERS.get(framework)
        if worker is None:
            worker = _WORKERS[framework] = Worker(framework)
        return worker


if __name__ == "__main__":
    # Run as a script, this folder is sys.path[0]; it holds a folder per framework (``verl/``, ...)
    # that would shadow the installed package of the same name.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    if len(sys.argv) != 2 or sys.argv[1] not in FRAMEWORKS:
        sys.stderr.write(f"usage: python subprocess_worker.py {{{'|'.join(FRAMEWORKS)}}}\n")
        sys.exit(2)
    sys.exit(serve(sys.argv[1]))
