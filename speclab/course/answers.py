"""Learner answers in a process of their own, called from a process that judges them and runs no learner code.

The grader's judge process runs every check (public and hidden) and never executes a line of a submission. A
case still calls the learner's function, `f(args)`, but `f` is a `RemoteAnswer`: the call goes to an *answer
worker*, a separate process that ran only the notebook's definitions (`definitions`: imports, functions,
classes, call-free assignments), and the result comes back. Whatever the learner's code patches (the checks,
speclab, torch), it patches in the worker; the judge's checks, helpers and references never reach it.

Only the judge is trusted, so the two directions differ: the judge pickles to the worker, keeping what a case
watches on its side (`_JudgePickler`); the worker sends plain data only, read with an unpickler that refuses
every global (`to_wire`, `plain_loads`). The worker's standard streams go nowhere: what a learner's function
prints comes back with its result (the public checks' "Your code printed"). labs/instructors.md says what
this defends against and what it does not.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import io
import linecache
import os
import pickle
import socket
import struct
import subprocess
import sys
import traceback
import types
from collections.abc import Iterator
from typing import Any

import torch

from speclab.course.checks import is_stub

_PLAIN_TYPES = (type(None), bool, int, float, str, bytes)
MAX_MESSAGE = 256 * 2**20  # bytes; a worker that sends more is treated as broken
MAX_PRINTED = 4000  # characters of what a learner's function printed, kept per call
SETUP_LIMIT_S = 60.0  # the worker's imports and the learner's definitions
TEST_MODULES = ("speclab.course.labs", "__main__")  # where the checks' own functions and classes live
# a model runner of the checks (lab 2 counts its passes), named rather than imported: importing speclab.runner
# costs the judge and every answer worker transformers and torch's compiler (~2 s a process), which only lab 2 needs
RUNNER = ("speclab.runner", "ModelRunner")
DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                              torch.complex128, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                              torch.bool)}


class WireError(Exception):
    """What a worker sent is not well-formed (a broken or hostile worker)."""


class WorkerDied(Exception):
    """The worker process ended (or was killed) in the middle of a call."""


class LearnerRaised(Exception):
    """The learner's function raised; `learner_message` says so in the learner's terms (see checks)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.learner_message = message


# ================================================================ the learner's definitions
KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _shell_free(source: str) -> str:
    """IPython-only lines (`%pip`, `!ls`, cell magics) become `pass`, indentation kept, so the cell parses."""
    lines = []
    for line in source.splitlines():
        body = line.lstrip()
        if body.startswith(("%", "!")):
            line = line[:len(line) - len(body)] + "pass"
        lines.append(line)
    return "\n".join(lines)


def _kept(node: ast.stmt) -> bool:
    """Imports and definitions, and assignments that call nothing (constants, aliases such as F = torch.nn.functional):
    never a top-level call, loop or demo, which could be slow, loop forever, or load a model."""
    if isinstance(node, KEPT):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        return not any(isinstance(n, (ast.Call, ast.Lambda, ast.Await, ast.Yield)) for n in ast.walk(node.value))
    return False


def definitions(cells: list[str]) -> list[tuple[str, str]]:
    """The statements of the learner's code cells that the worker runs, as (filename, source) in notebook
    order, one per top-level statement (so one that fails does not stop the others). A cell that does not
    parse is left out, as it fails in the notebook too."""
    out = []
    for i, source in enumerate(cells):
        text = _shell_free(source)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(True)
        for node in tree.body:
            if _kept(node):
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                out.append((f"<your notebook, cell {i}>", "\n" * (start - 1) + "".join(lines[start - 1:node.end_lineno])))
    return out


# ================================================================ the wire: framing, and plain data from the worker
def send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack("!Q", len(payload)) + payload)


def recv(sock: socket.socket) -> bytes:
    head = _read(sock, 8)
    size = struct.unpack("!Q", head)[0]
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes")
    return _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 2**20))
        if not chunk:
            raise WorkerDied("the worker closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _PlainUnpickler(pickle.Unpickler):
    """Reads only what pickle builds without a global: None, bool, int, float, str, bytes, list, tuple, dict,
    set. Every REDUCE needs a global first, so refusing globals refuses code."""

    def find_class(self, module: str, name: str):
        raise WireError(f"the worker sent a reference to {module}.{name}")

    def persistent_load(self, pid):
        raise WireError("the worker sent a persistent id")


def plain_loads(data: bytes) -> Any:
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except WireError:
        raise
    except Exception as err:  # noqa: BLE001 (malformed bytes of any kind)
        raise WireError(f"unreadable message: {type(err).__name__}") from None


def to_wire(x: Any, depth: int = 0) -> Any:
    """A value as plain data: scalars as they are, containers tagged (every tuple on the wire is a tag).
    worker -> judge: tensors travel as (dtype, shape, bytes); a 0-dim result that carries a gradient comes with
    its gradient in each argument, rebuilt in the judge with the same value and gradient; any other object
    arrives as a description."""
    if depth > 60:
        return ("o", "a structure nested too deep", "")
    if x is None or type(x) in (bool, int, float, str, bytes):
        return x
    if isinstance(x, int):  # subclasses (an IntEnum) as plain ints
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, str):
        return str(x)
    if isinstance(x, complex):
        return ("c", x.real, x.imag)
    if x is Ellipsis:
        return ("E",)
    if isinstance(x, torch.Tensor):
        return _tensor_to_wire(x)
    if type(x).__module__ == "numpy":
        if hasattr(x, "shape") and hasattr(x, "dtype") and x.shape != ():
            try:
                return ("N", _tensor_to_wire(torch.from_numpy(x.copy())))
            except (TypeError, ValueError):
                pass
        if hasattr(x, "item"):
            return ("n", to_wire(x.item(), depth + 1))
    if isinstance(x, (list, tuple, set, frozenset)):
        tag = "l" if isinstance(x, list) else "t" if isinstance(x, tuple) else "s"
        return (tag, [to_wire(v, depth + 1) for v in x])
    if isinstance(x, dict):
        return ("d", [(to_wire(k, depth + 1), to_wire(v, depth + 1)) for k, v in x.items()])
    return ("o", type(x).__name__, _safe_repr(x))


def _safe_repr(x: Any) -> str:
    try:
        return repr(x)[:200]
    except Exception:  # noqa: BLE001 (a learner's __repr__ may raise)
        return f"<{type(x).__name__} object>"


def _tensor_to_wire(t: torch.Tensor) -> tuple:
    data = t.detach().cpu().contiguous()
    raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
    return ("T", str(data.dtype), list(data.shape), raw, bool(t.requires_grad), t.grad_fn is not None)


def from_wire(x: Any, depth: int = 0) -> Any:
    """The inverse of `to_wire`, checking every tag: what a worker sends is not trusted."""
    if depth > 64:
        raise WireError("nested too deep")
    if x is None or type(x) in (bool, int, float, str, bytes):
        return x
    if type(x) is not tuple or not x or type(x[0]) is not str:
        raise WireError(f"unexpected {type(x).__name__}")
    tag, rest = x[0], x[1:]
    if tag in ("l", "t", "s") and len(rest) == 1 and type(rest[0]) is list:
        items = [from_wire(v, depth + 1) for v in rest[0]]
        return items if tag == "l" else tuple(items) if tag == "t" else set(items)
    if tag == "d" and len(rest) == 1 and type(rest[0]) is list:
        return {from_wire(_pair(kv)[0], depth + 1): from_wire(_pair(kv)[1], depth + 1) for kv in rest[0]}
    if tag == "E" and not rest:
        return Ellipsis
    if tag == "c" and len(rest) == 2 and all(type(v) is float for v in rest):
        return complex(*rest)
    if tag == "T":
        return _tensor_from_wire(rest)
    if tag == "N" and len(rest) == 1:
        return from_wire(rest[0], depth + 1).numpy()
    if tag == "n" and len(rest) == 1:
        return from_wire(rest[0], depth + 1)
    if tag == "o" and len(rest) == 2 and all(type(v) is str for v in rest):
        return opaque_type(rest[0])(rest[0], rest[1])
    raise WireError(f"unknown tag {tag!r}")


def _pair(kv: Any) -> tuple:
    if type(kv) is not tuple or len(kv) != 2:
        raise WireError("a malformed dict item")
    return kv


def _tensor_from_wire(rest: tuple) -> torch.Tensor:
    if len(rest) != 5 or rest[0] not in DTYPES or type(rest[1]) is not list or type(rest[2]) is not bytes:
        raise WireError("a malformed tensor")
    dtype, shape, raw = DTYPES[rest[0]], rest[1], rest[2]
    if not all(type(n) is int and n >= 0 for n in shape):
        raise WireError("a malformed tensor shape")
    numel = 1
    for n in shape:
        numel *= n
    if numel * torch.empty((), dtype=dtype).element_size() != len(raw):
        raise WireError("a tensor whose bytes do not match its shape")
    return _tensor_from_bytes(rest[0], tuple(shape), raw, bool(rest[3]) and dtype.is_floating_point)


def _tensor_from_bytes(dtype: str, shape: tuple, raw: bytes, requires_grad: bool) -> torch.Tensor:
    """A tensor from its dtype, shape and bytes, as a copy it owns: what the judge sends the worker
    (`_JudgePickler.reducer_override`), and what `_tensor_from_wire` rebuilds once it has checked them."""
    t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(DTYPES[dtype]).reshape(shape) if raw else \
        torch.empty(shape, dtype=DTYPES[dtype])
    return t.requires_grad_() if requires_grad else t


class Opaque:
    """An object the learner's function returned that is not plain data: only its type and repr crossed."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text or f"<{self.type_name} object>"


@functools.lru_cache(maxsize=256)
def opaque_type(type_name: str) -> type:
    """An Opaque subclass named as the learner's type, so that a check's message says "got a MyResult", not an
    internal name."""
    name = "".join(ch for ch in type_name.rsplit(".", 1)[-1] if ch.isalnum() or ch == "_")[:60] or "object"
    return type(name, (Opaque,), {"__qualname__": name})


def with_gradient(value: torch.Tensor, args: list[torch.Tensor], grads: list[torch.Tensor | None]) -> torch.Tensor:
    """A 0-dim tensor equal to `value` whose gradient in each of `args` is the one the worker computed:
    value + (s - s.detach()) with s = sum(a * g) is value exactly, and d/da of it is g."""
    s = sum(((a * g.to(a.dtype)).sum() for a, g in zip(args, grads) if g is not None and g.shape == a.shape),
            torch.zeros((), dtype=value.dtype))
    return value.detach() + (s - s.detach())


# ================================================================ the judge's side
def _is_case_object(obj: Any) -> bool:
    """Objects the case keeps watching after the call: they stay in the judge, the worker gets a handle."""
    return any((c.__module__, c.__qualname__) == RUNNER for c in type(obj).__mro__) or \
        type(obj).__module__.startswith(TEST_MODULES)


def _is_case_function(obj: Any) -> bool:
    if isinstance(obj, types.MethodType):
        return True
    if isinstance(obj, types.FunctionType):
        return obj.__module__ is None or obj.__module__.startswith(TEST_MODULES) or "<" in obj.__qualname__
    return False


class _JudgePickler(pickle.Pickler):
    """judge -> worker (the worker may unpickle what the judge wrote). What a case passes and keeps watching is
    not copied: functions (lab 9's `next_logits`) and the case's own objects (lab 2's counting `ModelRunner`, its
    forward hook) stay in the judge, and the worker gets a handle whose calls come back to the judge. Generators
    are copied and their final state comes back; so does the final content of a list or dict argument (lab 6
    changes its `pool` in place). A tensor such an argument holds that is still the same object on the same
    memory after the call (written in place: lab 10's static cache) is written back into the judge's own
    tensor; one the learner's code replaced or moved (`set_`, `.data =`) arrives as a new tensor, as it would
    in the notebook."""

    def __init__(self, file, process: AnswerProcess):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.process = process

    def persistent_id(self, obj: Any):
        if type(obj) in _PLAIN_TYPES:  # most of what a call carries: answered before the checks below
            return None
        if isinstance(obj, torch.Generator):
            return ("gen", self.process.keep(obj), obj.get_state())
        if _is_case_function(obj):
            return ("call", self.process.keep(obj))
        if not isinstance(obj, type) and _is_case_object(obj):
            return ("obj", self.process.keep(obj))
        return None

    def reducer_override(self, obj: Any):
        """A plain tensor as its dtype, shape and bytes, rebuilt by `_tensor_from_bytes`. torch's own pickling
        writes a legacy torch.save archive per storage, ~1 ms a tensor each way: a statistical case that calls
        the learner's function 3000 times spent most of its time there. Subclasses (a Parameter), tensors with
        a graph behind them and anything not strided on the CPU keep torch's pickling."""
        if (type(obj) is torch.Tensor and obj.grad_fn is None and obj.layout == torch.strided
                and obj.device.type == "cpu" and str(obj.dtype) in DTYPES):
            _, dtype, shape, raw, requires_grad, _ = _tensor_to_wire(obj)
            return _tensor_from_bytes, (dtype, tuple(shape), raw, requires_grad)
        return NotImplemented


class AnswerProcess:
    """The answer worker, seen from the judge: started with the learner's definitions, killed after a case
    runs out of time or when grading ends (with every process it started: it leads its own session)."""

    def __init__(self, statements: list[tuple[str, str]], workdir: str, isolate: list[str] | None = None,
                 env: dict[str, str] | None = None):
        self.statements, self.workdir, self.isolate, self.env = statements, workdir, isolate or [], env
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.kept: dict[int, Any] = {}
        self.setup_errors: list[str] = []

    # ---- lifetime
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start a fresh worker and run the learner's definitions in it (killing any earlier one)."""
        self.kill()
        mine, theirs = socket.socketpair()
        cmd = self.isolate + [sys.executable, "-m", "speclab.course.answers", str(theirs.fileno())]
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=self.env, pass_fds=(theirs.fileno(),),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self.sock = mine
        self.sock.settimeout(SETUP_LIMIT_S)
        try:
            reply = self._request(("load", self.statements))
        finally:
            if self.sock is not None:
                self.sock.settimeout(None)
        if type(reply) is not tuple or reply[:1] != ("ready",) or len(reply) != 2 or type(reply[1]) is not list:
            raise WireError("the worker did not start")
        self.setup_errors = [str(e)[:300] for e in reply[1] if type(e) is str]

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, 9)
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=10)
        if self.sock is not None:
            self.sock.close()
        self.proc, self.sock = None, None
        self.kept.clear()

    def keep(self, obj: Any) -> int:
        self.kept[id(obj)] = obj
        return id(obj)

    # ---- requests
    def lookup(self, name: str) -> tuple[str, Any]:
        """('missing', None), ('callable', whether it is the untouched stub) or ('value', the value) for a name
        of the learner's."""
        assert self.sock is not None
        self.sock.settimeout(SETUP_LIMIT_S)  # a worker busy with something else of the learner's
        try:
            reply = self._request(("lookup", name))
        finally:
            if self.sock is not None:
                self.sock.settimeout(None)
        if reply == ("missing",):
            return "missing", None
        if type(reply) is tuple and len(reply) == 2 and reply[0] == "callable":
            return "callable", reply[1] is True
        if type(reply) is tuple and len(reply) == 2 and reply[0] == "value":
            return "value", from_wire(reply[1])
        raise WireError("a malformed lookup reply")

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        """The learner's `name(*args, **kwargs)`, run in the worker; callbacks and attribute reads of the case's
        objects are served here meanwhile. A failure inside a case's callback is raised after the call, so a
        learner's `except` cannot hide it."""
        self.kept = {}  # handles live for one call: what an earlier call passed is out of the worker's reach
        reply = self._request(("call", name, args, kwargs), serve=True)
        if type(reply) is not tuple or not reply:
            raise WireError("a malformed reply")
        if reply[0] == "raised" and len(reply) == 3 and type(reply[2]) is str:
            if reply[1] == "NotImplementedError":
                raise NotImplementedError
            raise LearnerRaised(reply[2][:2000])
        if reply[0] != "ok" or len(reply) != 5:
            raise WireError("a malformed reply")
        _, result, printed, synced, grads = reply
        if type(printed) is str and printed:
            print(printed[:MAX_PRINTED], end="")  # the case's captured output: "Your code printed"
        self._sync(args, kwargs, synced)
        value = from_wire(result)
        if isinstance(value, torch.Tensor) and value.dim() == 0 and type(grads) is list and grads:
            leaves = [a for a in _tensor_args(args, kwargs) if a.requires_grad]
            value = with_gradient(value, leaves, [from_wire(g) if g is not None else None for g in grads])
        return value

    def _sync(self, args: tuple, kwargs: dict, synced: Any) -> None:
        """Copy back into the case's objects what the learner's call changed: generator states and the content
        of list and dict arguments, whose tensors that the learner's code kept (the same objects) are written
        into the case's own."""
        if type(synced) is not tuple or len(synced) != 3:
            raise WireError("a malformed state")
        gens, containers, kept = synced
        for key, state in _items(gens):
            g = self.kept.get(key)
            if isinstance(g, torch.Generator):
                with contextlib.suppress(RuntimeError, TypeError):
                    g.set_state(from_wire(state).to(torch.uint8))
        targets = list(args) + list(kwargs.values())
        same = dict(_items(kept))
        for i, content in _items(containers):
            if type(i) is int and 0 <= i < len(targets):
                keys = same.get(i, [])
                _refill(targets[i], from_wire(content), [from_wire(k) for k in keys] if type(keys) is list else [])

    def _request(self, message: tuple, serve: bool = False) -> Any:
        if self.sock is None:
            raise WorkerDied("no worker")
        buf = io.BytesIO()
        _JudgePickler(buf, self).dump(message)
        send(self.sock, buf.getvalue())
        failure: BaseException | None = None
        while True:
            reply = plain_loads(recv(self.sock))
            if serve and type(reply) is tuple and reply[:1] in (("callback",), ("getattr",)):
                answer, error = self._serve(reply)
                failure = failure or error
                buf = io.BytesIO()
                _JudgePickler(buf, self).dump(answer)
                send(self.sock, buf.getvalue())
                continue
            if failure is not None:
                raise failure
            return reply

    def _serve(self, request: tuple) -> tuple[tuple, BaseException | None]:
        """Run a callback or read an attribute of a case's object, for the worker."""
        try:
            if request[0] == "callback" and len(request) == 4:
                target = self.kept[request[1]]
                args, kwargs = from_wire(request[2]), from_wire(request[3])
                if not callable(target) or type(args) is not list or type(kwargs) is not dict:
                    raise WireError("a malformed callback")
                return ("cb_ok", target(*args, **{str(k): v for k, v in kwargs.items()})), None
            if request[0] == "getattr" and len(request) == 3 and type(request[2]) is str:
                if request[2].startswith("_"):
                    raise AttributeError(f"the checks' objects do not show {request[2]!r}")
                return ("cb_ok", getattr(self.kept[request[1]], request[2])), None
            raise WireError("a malformed request")
        except Exception as err:  # noqa: BLE001 (reported to the learner's code, then raised in the case)
            return ("cb_err", type(err).__name__, str(err)[:500]), err


def _items(x: Any) -> list[tuple[Any, Any]]:
    if type(x) is not list or not all(type(kv) is tuple and len(kv) == 2 for kv in x):
        raise WireError("a malformed state")
    return x


def _refill(target: Any, content: Any, kept: list | tuple = ()) -> None:
    """`target` (a case's list or dict) holds `content` afterwards; at the keys in `kept` (indices of a list), where
    the learner's code kept the very tensor it was given, the case's own tensor takes the new values in place."""
    if isinstance(target, dict) and isinstance(content, dict):
        for key in kept:
            with contextlib.suppress(TypeError):
                if key in target and key in content:
                    content[key] = _written_into(target[key], content[key])
        target.clear()
        target.update(content)
    elif isinstance(target, list) and isinstance(content, list):
        for i in kept:
            if type(i) is int and 0 <= i < min(len(target), len(content)):
                content[i] = _written_into(target[i], content[i])
        target[:] = content


def _written_into(old: Any, new: Any) -> Any:
    """`old` with `new`'s values, when both are tensors of one shape and dtype (else `new`)."""
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.shape == new.shape and \
            old.dtype == new.dtype:
        with torch.no_grad():
            old.copy_(new)
        return old
    return new


def _tensor_args(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]


class RemoteAnswer:
    """The learner's function as a case sees it: calling it runs the learner's code in the worker."""

    def __init__(self, process: AnswerProcess, name: str, is_stub: bool = False):
        self.process, self.__name__, self.is_stub = process, name, is_stub

    def prepare(self) -> None:
        """Start a fresh worker if an earlier case killed it: called before a case's clock starts."""
        if not self.process.alive:
            self.process.start()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.process.call(self.__name__, args, kwargs)
        except (WireError, WorkerDied, OSError) as err:
            self.process.kill()
            raise LearnerRaised(f"your code broke the process it ran in ({err}): did it exit or crash the "
                                "interpreter?") from None
        except (LearnerRaised, NotImplementedError):  # the worker caught it and answered: still in a known state
            raise
        except BaseException:  # a case's time limit, mid-call: the worker is in an unknown state
            self.process.kill()
            raise

    def __repr__(self) -> str:
        return f"<your function {self.__name__}>"


class RemoteNamespace:
    """The learner's names, as `Lab.run` reads them (`name in ns`, `ns.get(name)`), answered by the worker.
    Restarts the worker first if an earlier case had to kill it."""

    def __init__(self, process: AnswerProcess):
        self.process = process

    def ensure(self) -> None:
        if not self.process.alive:
            self.process.start()

    def __contains__(self, name: object) -> bool:
        self.ensure()
        return self.process.lookup(str(name))[0] != "missing"

    def get(self, name: str, default: Any = None) -> Any:
        self.ensure()
        kind, value = self.process.lookup(name)
        if kind == "missing":
            return default
        return RemoteAnswer(self.process, name, value) if kind == "callable" else value


# ================================================================ the worker's side
class _Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.gens: dict[int, torch.Generator] = {}

    def send(self, message: tuple) -> None:
        send(self.sock, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def receive(self) -> Any:
        return _WorkerUnpickler(io.BytesIO(recv(self.sock)), self).load()

    def ask(self, message: tuple) -> Any:
        """A callback or attribute read, answered by the judge."""
        self.send(message)
        reply = self.receive()
        if reply[0] == "cb_err":
            raise CaseError(f"{reply[1]}: {reply[2]}")
        return reply[1]


class CaseError(Exception):
    """A call into the checks' objects failed (in the judge, which fails the case whatever the learner does)."""


class _WorkerUnpickler(pickle.Unpickler):
    def __init__(self, file, channel: _Channel):
        super().__init__(file)
        self.channel = channel

    def persistent_load(self, pid):
        kind, key = pid[0], pid[1]
        if kind == "gen":
            g = torch.Generator()
            g.set_state(pid[2])
            self.channel.gens[key] = g
            return g
        if kind == "call":
            return _Handle(self.channel, key)
        return _ObjectHandle(self.channel, key)


class _Handle:
    """A function of the checks: calling it runs it in the judge."""

    def __init__(self, channel: _Channel, key: int):
        self._channel, self._key = channel, key

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.ask(("callback", self._key, to_wire(list(args)), to_wire(dict(kwargs))))


class _ObjectHandle(_Handle):
    """An object of the checks (a ModelRunner): its attributes are read, and its methods run, in the judge."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._channel.ask(("getattr", self._key, name))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_channel", "_key"):
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(f"the checks' {name!r} cannot be set")


def _describe(err: BaseException, filenames: set[str]) -> str:
    """'your code raised X in `f`, at the line `...`', as speclab.course.checks words it."""
    text = f"{type(err).__name__}: {err}".strip()
    mine = [f for f in traceback.extract_tb(err.__traceback__) if f.filename in filenames]
    if not mine:
        return f"your code raised {text}"
    f = mine[-1]
    where = f" in `{f.name}`" if f.name != "<module>" else ""
    line = (f.line or "").strip()
    return f"your code raised {text}{where}" + (f", at the line `{line}`" if line else "")


def _remember(filename: str, source: str) -> None:
    """Put a statement's lines where tracebacks look for them; the statements of one cell share its name (and
    its line numbers), so each fills in its own lines."""
    lines = list(linecache.cache.get(filename, (0, None, [], filename))[2])
    new = source.splitlines(True)
    lines += ["\n"] * (len(new) - len(lines))
    for i, line in enumerate(new):
        if line.strip():
            lines[i] = line
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def _load(statements: Any, ns: dict) -> list[str]:
    errors = []
    for filename, source in statements:
        _remember(filename, source)
        try:
            exec(compile(source, filename, "exec"), ns)
        except Exception as err:  # noqa: BLE001 (the notebook reported it to the learner already)
            errors.append(f"{filename}: {type(err).__name__}: {err}")
    return errors


def _call(channel: _Channel, ns: dict, filenames: set[str], name: str, args: tuple, kwargs: dict) -> tuple:
    out = io.StringIO()
    grads: list = []
    targets = list(args) + list(kwargs.values())
    given = {i: dict(_entries(a)) for i, a in enumerate(targets) if isinstance(a, (list, dict))}  # held while it runs
    memory = {(i, k): v.data_ptr() for i, was in given.items() for k, v in was.items() if isinstance(v, torch.Tensor)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            result = ns[name](*args, **kwargs)
            grads = _gradients(result, args, kwargs)
    except CaseError as err:
        return ("raised", "CaseError", f"a call into the checks failed: {err}")
    except Exception as err:  # noqa: BLE001 (the learner's error, in words)
        return ("raised", type(err).__name__, _describe(err, filenames))
    except SystemExit as err:  # exit() in an answer ends its call, not the worker (os._exit still ends it)
        return ("raised", "SystemExit", f"your code called exit({err.code!r}): return a value instead")
    except BaseException as err:  # noqa: BLE001 (a bare BaseException, GeneratorExit: a message, as check() gives)
        return ("raised", type(err).__name__, _describe(err, filenames))
    kept = [(i, [to_wire(k) for k, v in _entries(targets[i]) if isinstance(v, torch.Tensor) and was.get(k) is v
                 and v.data_ptr() == memory.get((i, k))])
            for i, was in given.items()]  # still there: the objects given, on their memory
    synced = ([(k, _tensor_to_wire(g.get_state())) for k, g in channel.gens.items()],
              [(i, to_wire(a)) for i, a in enumerate(targets) if isinstance(a, (list, dict))], kept)
    return ("ok", to_wire(result), out.getvalue()[:MAX_PRINTED], synced, grads)


def _entries(container: Any) -> list[tuple[Any, Any]]:
    """(key, value) of a dict, (index, item) of a list, as they are now."""
    if isinstance(container, dict):
        return list(container.items())
    return list(enumerate(container)) if isinstance(container, list) else []


def _gradients(result: Any, args: tuple, kwargs: dict) -> list:
    """The gradient of a 0-dim result in each argument that requires one (None where it does not reach)."""
    leaves = [a for a in _tensor_args(args, kwargs) if a.requires_grad]
    if not (isinstance(result, torch.Tensor) and result.dim() == 0 and result.grad_fn is not None and leaves):
        return []
    grads = torch.autograd.grad(result, leaves, allow_unused=True, retain_graph=True)
    return [_tensor_to_wire(g) if g is not None else None for g in grads]


def serve(fd: int) -> None:
    """The worker's loop: load the learner's definitions, then answer lookups and calls until the judge hangs up."""
    channel = _Channel(socket.socket(fileno=fd))
    ns: dict = {"__name__": "__main__"}
    filenames: set[str] = set()
    while True:
        channel.gens.clear()  # the generators of one call: registered while its message is read
        try:
            message = channel.receive()
        except WorkerDied:
            return
        kind = message[0]
        if kind == "load":
            filenames = {f for f, _ in message[1]}
            channel.send(("ready", _load(message[1], ns)))
        elif kind == "lookup":
            value = ns.get(message[1], _MISSING)
            channel.send(("missing",) if value is _MISSING else ("callable", is_stub(value)) if callable(value)
                         else ("value", to_wire(value)))
        elif kind == "call":
            channel.send(_call(channel, ns, filenames, message[1], message[2], message[3]))


_MISSING = object()


@contextlib.contextmanager
def started(process: AnswerProcess) -> Iterator[AnswerProcess]:
    """The worker, started, and killed at the end whatever happens."""
    try:
        process.start()
        yield process
    finally:
        process.kill()


if __name__ == "__main__":
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    serve(int(sys.argv[1]))
