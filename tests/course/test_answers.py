"""The answer worker and its wire (speclab.course.answers): what a worker sends can only be plain data,
the learner's notebook contributes only its definitions, and a 0-dim result keeps its gradient."""
from __future__ import annotations

import io
import os
import pickle
import tempfile

import pytest
import torch

from speclab.course.answers import (AnswerProcess, LearnerRaised, Opaque, RemoteNamespace, WireError, definitions,
                                    from_wire, plain_loads, to_wire, with_gradient)


def test_the_judge_refuses_a_pickle_that_names_anything():
    evil = pickle.dumps(os.system)  # unpickling would import os and hand back os.system
    with pytest.raises(WireError):
        plain_loads(evil)

    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))
    with pytest.raises(WireError):
        plain_loads(pickle.dumps(Boom()))
    assert plain_loads(pickle.dumps(("l", [1, 2.5, None, "x", b"y"]))) == ("l", [1, 2.5, None, "x", b"y"])


def test_values_cross_as_plain_data_and_come_back_alike():
    value = {"a": (1, [2.5, None], {3}), 4: torch.tensor([[True, False]]), "e": ..., "h": torch.tensor(0.5).half()}
    back = from_wire(plain_loads(pickle.dumps(to_wire(value))))
    assert back["a"] == (1, [2.5, None], {3}) and back["e"] is Ellipsis
    assert back[4].dtype == torch.bool and back[4].tolist() == [[True, False]] and back["h"].dtype == torch.float16
    assert isinstance(from_wire(to_wire(object())), Opaque)

    class MyResult:  # a learner's own type keeps its name in a check's message (not "Opaque")
        pass
    assert type(from_wire(to_wire(MyResult()))).__name__ == "MyResult"
    for bad in [("T", "torch.float32", [2], b"abc", False, False), ("zz",), ["l", []], ("d", [(1,)])]:
        with pytest.raises(WireError):
            from_wire(bad)


def test_a_scalar_result_keeps_the_gradient_the_worker_computed():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = with_gradient(torch.tensor(3.25), [x], [torch.tensor([0.5, -1.0])])
    assert out.item() == 3.25 and out.requires_grad and out.dim() == 0
    out.backward()
    assert x.grad.tolist() == [0.5, -1.0]


def test_only_imports_definitions_and_call_free_assignments_are_kept():
    cells = ["import torch\nF = torch.nn.functional\nx = torch.zeros(3)\nprint('demo')\nwhile True:\n    pass",
             "%pip install x\n!ls\ndef f(a):\n    return a + 1\nf(1)", "def broken(:\n    pass",
             "@staticmethod\ndef g():\n    return 2\nclass C:\n    pass\nlab = Lab('lab01')"]
    kept = "\n".join(src for _, src in definitions(cells))
    for present in ("import torch", "F = torch.nn.functional", "def f(a):", "@staticmethod", "class C:"):
        assert present in kept
    for absent in ("torch.zeros", "print('demo')", "while True", "f(1)", "broken", "Lab("):
        assert absent not in kept


def worker(code: str) -> tuple[AnswerProcess, RemoteNamespace]:
    process = AnswerProcess(definitions([code]), tempfile.mkdtemp())
    return process, RemoteNamespace(process)


def test_a_call_runs_in_the_worker_with_callbacks_generators_and_in_place_changes_coming_back():
    process, ns = worker("import torch\ndef f(pool, g, cb):\n    pool['k'] = [(1, 2)]\n    print('hi')\n"
                         "    return cb(3) + float(torch.rand((), generator=g))\n")
    try:
        assert "f" in ns and "nope" not in ns
        pool, g, seen = {}, torch.Generator().manual_seed(0), []
        expected = 6 + float(torch.rand((), generator=torch.Generator().manual_seed(0)))
        out = io.StringIO()
        import contextlib
        with contextlib.redirect_stdout(out):
            got = ns.get("f")(pool, g, lambda v: seen.append(v) or 2 * v)
        assert got == pytest.approx(expected) and seen == [3] and pool == {"k": [(1, 2)]}
        assert out.getvalue() == "hi\n"
        assert torch.equal(g.get_state(), torch.Generator().manual_seed(0).get_state()) is False  # advanced
    finally:
        process.kill()


def test_an_error_in_the_learners_code_is_worded_and_an_exit_is_survived():
    process, ns = worker("def f(x):\n    return 1 / x\ndef g():\n    import os\n    os._exit(3)\n"
                         "def h(e):\n    raise e\n")
    try:
        f = ns.get("f")  # as a case holds it
        with pytest.raises(LearnerRaised, match=r"ZeroDivisionError: division by zero in `f`, at the line `return 1 / x`"):
            f(0)
        assert f(2) == 0.5  # the worker caught the exception and answered: the case may call again
        with pytest.raises(LearnerRaised, match=r"your code called exit\(3\)"):
            ns.get("h")(SystemExit(3))
        for raised in (BaseException("odd"), GeneratorExit(), KeyboardInterrupt()):  # worded, and the worker lives
            with pytest.raises(LearnerRaised, match=f"your code raised {type(raised).__name__}"):
                ns.get("h")(raised)
        assert f(2) == 0.5
        with pytest.raises(LearnerRaised, match="broke the process"):
            ns.get("g")()
        ns.get("f").prepare()  # a fresh worker for the next case
        assert ns.get("f")(4) == 0.25
    finally:
        process.kill()


def test_tensors_reach_the_worker_as_the_case_sent_them():
    """The judge sends plain tensors as dtype, shape and bytes (not torch's archive format, ~1 ms a tensor):
    values, dtype, shape and requires_grad arrive; a view arrives as its values; a Parameter by torch's way."""
    process, ns = worker("import torch\ndef f(*ts):\n"
                         "    return [(str(t.dtype), list(t.shape), t.tolist(), t.requires_grad,\n"
                         "             type(t).__name__) for t in ts]\n")
    try:
        base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
        sent = [base, base.t()[1:], torch.tensor([True, False]), torch.zeros(0, 2, dtype=torch.int8),
                torch.tensor(2.5, dtype=torch.bfloat16), torch.ones(2, requires_grad=True),
                torch.nn.Parameter(torch.ones(1)), torch.tensor([1.0]).expand(3)]
        got = ns.get("f")(*sent)
        for t, (dtype, shape, values, grad, kind) in zip(sent, got):
            assert (dtype, shape, values, grad) == (str(t.dtype), list(t.shape), t.tolist(), t.requires_grad)
            assert kind == type(t).__name__
    finally:
        process.kill()


def test_a_tensor_written_in_place_comes_back_into_the_cases_own_tensor():
    """A dict or list argument's tensor that the learner's code kept (lab 10's static cache, written by slice) is
    the very object the case passed after the call, with the new values; one replaced by another tensor comes
    back as a new object, and the case's own is left as it was, as in the notebook."""
    process, ns = worker("import torch\ndef f(d, l):\n    d['a'][0] = 5\n    d['b'] = d['b'].clone().fill_(7)\n"
                         "    l[0].add_(1)\n    l[1] = torch.zeros(1)\n")
    try:
        a, b, x, y = torch.zeros(2), torch.zeros(2), torch.zeros(1), torch.ones(1)
        d, items = {"a": a, "b": b}, [x, y]
        ns.get("f")(d, items)
        assert d["a"] is a and a.tolist() == [5.0, 0.0] and items[0] is x and x.tolist() == [1.0]
        assert d["b"] is not b and d["b"].tolist() == [7.0, 7.0] and b.tolist() == [0.0, 0.0]
        assert items[1] is not y and items[1].tolist() == [0.0] and y.tolist() == [1.0]
    finally:
        process.kill()


def test_a_tensor_moved_to_new_memory_comes_back_as_a_new_tensor():
    """The same object on new memory (`set_` onto a copy, or `.data =`) is a copy, not a write in place: it comes
    back as a new tensor and the case's own keeps its values, as lab 10's check sees it in the notebook."""
    process, ns = worker("import torch\ndef f(d):\n    d['a'].set_(d['a'].clone().fill_(3))\n"
                         "    d['b'].data = torch.full((2,), 4.0)\n")
    try:
        a, b = torch.zeros(2), torch.zeros(2)
        d = {"a": a, "b": b}
        ns.get("f")(d)
        assert d["a"] is not a and d["a"].tolist() == [3.0, 3.0] and a.tolist() == [0.0, 0.0]
        assert d["b"] is not b and d["b"].tolist() == [4.0, 4.0] and b.tolist() == [0.0, 0.0]
    finally:
        process.kill()
