"""How tool callbacks run: on the Python thread that called execute_proposal
(the engine runs there too and serves its calls in batches), never inside an
async runtime, so a tool may call back into the same runtime, even run a
nested proposal. Exceptions fail the action, TerminalToolError is terminal,
KeyboardInterrupt aborts and rolls back, per-attempt timeouts still hold,
slow tools still overlap, and concurrent callers each serve their own calls."""
import _thread
import json
import signal
import threading
import time

import pytest

import car_runtime as car


def proposal(*actions, pid="p1"):
    return {"id": pid, "actions": list(actions)}


def tool_call(aid, tool="t", **extra):
    return {"id": aid, "type": "tool_call", "tool": tool, **extra}


def results(out):
    return {r["action_id"]: r for r in json.loads(out)["results"]}


def test_callbacks_run_on_the_calling_thread_for_every_entry_point():
    rt = car.CarRuntime()
    rt.register_tool("t")
    me = threading.get_ident()
    seen = []

    def one(call_json):
        seen.append(threading.get_ident())
        return "{}"

    def two(tool, params_json):
        seen.append(threading.get_ident())
        return {"tool": tool, "params": json.loads(params_json)}

    # A chain: one call waits at a time, so none is ever handed to a helper thread.
    out = rt.execute_proposal(proposal(*[tool_call(f"a{i}", dependencies=[f"a{i-1}"] if i else []) for i in range(50)]), one)
    assert all(r["status"] == "succeeded" for r in results(out).values())
    out = results(rt.execute_proposal(proposal(tool_call("b", parameters={"x": 1})), two))
    assert out["b"]["output"] == {"tool": "t", "params": {"x": 1}}
    car.register_tool_handler(one)
    try:
        rt.submit_proposal(proposal(tool_call("c")))
    finally:
        car.unregister_tool_handler()
    car.execute(proposal(tool_call("d")), ["t"], two)
    assert len(seen) == 53 and set(seen) == {me}


def test_a_tool_may_run_a_nested_proposal_on_the_same_runtime():
    rt = car.CarRuntime()
    rt.register_tool("outer")
    rt.register_tool("inner")

    def tool(call_json):
        call = json.loads(call_json)
        if call["tool"] == "inner":
            rt.state_set(f"inner_{call['params']['n']}", call["params"]["n"])
            return {"inner": call["params"]["n"]}
        n = call["params"]["n"]
        nested = rt.execute_proposal(proposal(
            tool_call("i1", "inner", parameters={"n": n}),
            tool_call("i2", "inner", parameters={"n": n + 100}, dependencies=["i1"]),
            pid=f"nested{n}",
        ), tool)
        return {"nested": [r["output"] for r in json.loads(nested)["results"]]}

    out = results(rt.execute_proposal(proposal(
        tool_call("o1", "outer", parameters={"n": 1}),
        tool_call("o2", "outer", parameters={"n": 2}),
        tool_call("o3", "outer", parameters={"n": 3}, dependencies=["o1"]),
    ), tool))
    assert out["o1"]["output"] == {"nested": [{"inner": 1}, {"inner": 101}]}
    assert out["o2"]["output"] == {"nested": [{"inner": 2}, {"inner": 102}]}
    assert out["o3"]["output"] == {"nested": [{"inner": 3}, {"inner": 103}]}
    assert sorted(rt.state_keys()) == sorted(f"inner_{n}" for n in (1, 2, 3, 101, 102, 103))


def test_exceptions_fail_only_their_action_and_results_are_converted():
    rt = car.CarRuntime()
    rt.register_tool("t")

    class Opaque:
        pass

    def tool(call_json):
        i = json.loads(call_json)["params"]["i"]
        if i % 5 == 0:
            raise ValueError(f"bad {i}")
        if i % 5 == 1:
            return None
        if i % 5 == 2:
            return Opaque()
        if i % 5 == 3:
            return "plain words"
        return {"i": i}

    out = results(rt.execute_proposal(proposal(
        *[tool_call(f"a{i}", parameters={"i": i}, failure_behavior="skip") for i in range(200)]
    ), tool))
    for i in range(200):
        r = out[f"a{i}"]
        if i % 5 == 0:
            assert r["status"] == "skipped" and r["error"] == f"ValueError: bad {i}" and "terminal" not in r
        elif i % 5 == 1:
            assert r["status"] == "succeeded" and r.get("output") is None
        elif i % 5 == 2:
            assert r["status"] == "skipped" and "not JSON-serialisable" in r["error"]
        elif i % 5 == 3:
            assert r["status"] == "succeeded" and r["output"] == "plain words"
        else:
            assert r["status"] == "succeeded" and r["output"] == {"i": i}


def test_terminal_error_among_many_calls_aborts_and_rolls_back():
    rt = car.CarRuntime()
    rt.register_tool("t")
    rt.state_set("balance", 10)

    def tool(call_json):
        if json.loads(call_json)["action_id"] == "a7":
            raise car.TerminalToolError("stop everything")
        return "{}"

    out = results(rt.execute_proposal(proposal(
        {"id": "w", "type": "state_write", "parameters": {"key": "balance", "value": 0}},
        *[tool_call(f"a{i}", dependencies=["w"], failure_behavior="retry", max_retries=3) for i in range(20)],
    ), tool))
    assert out["a7"]["status"] == "failed" and out["a7"]["terminal"] is True
    assert out["a7"]["error"] == "stop everything"
    assert out["w"]["rolled_back"] is True
    assert json.loads(rt.state_get("balance")) == 10


def test_keyboard_interrupt_from_a_tool_aborts_rolls_back_and_is_raised():
    rt = car.CarRuntime()
    rt.register_tool("t")
    rt.state_set("k", json.dumps("before"))
    ran = []

    def tool(call_json):
        aid = json.loads(call_json)["action_id"]
        ran.append(aid)
        if aid == "boom":
            raise KeyboardInterrupt
        return "{}"

    with pytest.raises(KeyboardInterrupt):
        rt.execute_proposal(proposal(
            {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": "after"}},
            tool_call("boom", dependencies=["w"]),
            tool_call("later", dependencies=["boom"]),
        ), tool)
    assert ran == ["boom"]
    assert json.loads(rt.state_get("k")) == "before"
    # The runtime is usable afterwards.
    out = results(rt.execute_proposal(proposal(tool_call("again")), tool))
    assert out["again"]["status"] == "succeeded"


def test_ctrl_c_while_the_caller_waits_cancels_the_rest_of_the_run():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach only the main thread")
    rt = car.CarRuntime()
    rt.register_tool("t")
    rt.state_set("k", json.dumps("before"))
    b_started = threading.Event()
    release = threading.Event()
    ran = []

    def tool(call_json):
        aid = json.loads(call_json)["action_id"]
        ran.append(aid)
        if aid == "a":
            # Runs on the caller's thread, or moves to a helper thread if b
            # holds the caller: either way it ends once b has started.
            assert b_started.wait(5)
        elif aid == "b":
            b_started.set()
            release.wait(5)  # Ctrl-C reaches the caller while b still runs
        return "{}"

    def interrupt_then_release():
        b_started.wait(5)
        _thread.interrupt_main()
        threading.Event().wait(0.2)
        release.set()

    # Ctrl-C as Python delivers it by default. A Python started with SIGINT
    # ignored (a shell without job control starts `cmd &` that way, so a
    # backgrounded `scripts/test` did) installs no handler, and then
    # `interrupt_main` does nothing at all; what an application's own
    # handler does with Ctrl-C is its business.
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    helper = threading.Thread(target=interrupt_then_release)
    helper.start()
    t0 = time.monotonic()
    try:
        try:
            out = rt.execute_proposal(proposal(
                {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": "after"}},
                tool_call("a"),
                tool_call("b"),
                tool_call("c", dependencies=["b"]),
            ), tool)
        except KeyboardInterrupt:
            pass
        else:
            # Seen twice under a heavily loaded machine: say what happened.
            pytest.fail(f"no KeyboardInterrupt after {time.monotonic() - t0:.3f} s; "
                        f"ran {ran}, b started: {b_started.is_set()}; result {out}")
    finally:
        signal.signal(signal.SIGINT, previous)
        release.set()
        helper.join()
    assert "c" not in ran, "no tool runs after the interrupt"
    assert json.loads(rt.state_get("k")) == "before", "the run was rolled back"


def test_per_attempt_timeout_still_applies_to_a_slow_python_tool():
    rt = car.CarRuntime()
    rt.register_tool("t")
    attempts = []

    def tool(call_json):
        call = json.loads(call_json)
        attempts.append(call["attempt"])
        if call["attempt"] == 1:
            threading.Event().wait(0.3)  # beyond the 50 ms budget: the late answer is discarded
        return {"attempt": call["attempt"]}

    out = results(rt.execute_proposal(proposal(
        tool_call("slow", timeout_ms=50, failure_behavior="retry", max_retries=2),
        tool_call("once", timeout_ms=50),
    ), lambda c: tool(c) if json.loads(c)["action_id"] == "slow" else "{}"))
    assert attempts == [1, 2]
    assert out["slow"]["status"] == "succeeded" and out["slow"]["output"] == {"attempt": 2}
    assert out["once"]["status"] == "succeeded"

    def late(call_json):
        threading.Event().wait(0.2)
        return {"too": "late"}

    out = results(rt.execute_proposal(proposal(tool_call("late", timeout_ms=20)), late))
    assert out["late"]["status"] == "failed" and "timed out after 20 ms" in out["late"]["error"]


def test_slow_tools_that_wait_on_each_other_still_overlap():
    rt = car.CarRuntime()
    rt.register_tool("t")
    barrier = threading.Barrier(4, timeout=10)

    def tool(call_json):
        barrier.wait()  # passes only when all four run at the same time
        return {"thread": threading.get_ident()}

    out = results(rt.execute_proposal(proposal(*[tool_call(f"a{i}") for i in range(4)]), tool))
    assert all(r["status"] == "succeeded" for r in out.values())
    assert len({r["output"]["thread"] for r in out.values()}) == 4


def test_concurrent_callers_each_serve_their_own_calls():
    rt = car.CarRuntime()
    rt.register_tool("t")
    errors = []

    def submit(i):
        me = threading.get_ident()
        try:
            def tool(call_json):
                call = json.loads(call_json)
                rt.state_set(f"{i}:{call['action_id']}", call["params"]["v"])
                return {"caller": i, "on_caller_thread": threading.get_ident() == me}

            out = results(rt.execute_proposal(proposal(
                *[tool_call(f"a{j}", parameters={"v": j}, dependencies=[f"a{j-1}"] if j % 2 else []) for j in range(100)],
                pid=f"p{i}",
            ), tool))
            assert len(out) == 100
            for r in out.values():
                assert r["status"] == "succeeded" and r["output"]["caller"] == i
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(rt.state_keys()) == 800


def test_the_callback_arity_is_read_from_the_signature_for_every_kind_of_callable():
    import functools

    rt = car.CarRuntime()
    rt.register_tool("t")
    p = proposal(tool_call("a", parameters={"x": 1}))

    def two(tool, params_json):
        return {"args": 2, "tool": tool, "params": json.loads(params_json)}

    def one(call_json):
        return {"args": 1, "action": json.loads(call_json)["action_id"]}

    def one_with_default(call_json, extra=None):
        return one(call_json)

    def var(*args):
        return {"args": len(args)}

    def one_then_var(call_json, *rest):
        return {"args": 1 + len(rest)}

    def two_kwonly(tool, params_json, *, flag=False):
        return two(tool, params_json)

    @functools.wraps(two)
    def wrapped(*args, **kwargs):  # inspect follows __wrapped__: two arguments
        return two(*args, **kwargs)

    class Host:
        def method(self, tool, params_json):
            return two(tool, params_json)

        def __call__(self, call_json):
            return one(call_json)

    cases = [
        (two, 2), (one, 1), (one_with_default, 1), (var, 1), (one_then_var, 1), (two_kwonly, 2),
        (wrapped, 2), (Host().method, 2), (Host(), 1), (functools.partial(two, "t"), 1),
        (lambda tool, params: two(tool, params), 2), (lambda c: one(c), 1),
    ]
    for f, expected in cases:
        out = results(rt.execute_proposal(p, f))["a"]
        assert out["status"] == "succeeded", (f, out)
        if isinstance(f, functools.partial):
            # partial(two, "t") takes the call JSON as params_json.
            assert out["output"]["tool"] == "t" and out["output"]["params"]["action_id"] == "a"
            continue
        assert out["output"]["args"] == expected, (f, out)
