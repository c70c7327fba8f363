"""asyncio: coroutine tools are awaited, and the *_async calls never block the loop."""
import asyncio
import json
import threading

import pytest

import car_runtime


def proposal(*tools):
    return {"actions": [{"id": f"a{i}", "type": "tool_call", "tool": t} for i, t in enumerate(tools)]}


def runtime(*tools):
    rt = car_runtime.CarRuntime()
    for t in tools:
        rt.register_tool(t)
    return rt


def test_async_def_tool_is_awaited_by_the_sync_call():
    async def tool(call_json):
        await asyncio.sleep(0)
        return {"echo": json.loads(call_json)["tool"]}

    out = json.loads(runtime("t").execute_proposal(proposal("t"), tool))
    assert out["results"][0]["status"] == "succeeded"
    assert out["results"][0]["output"] == {"echo": "t"}


def test_two_argument_async_tool():
    async def tool(name, params_json):
        return {"tool": name, "params": json.loads(params_json)}

    p = {"actions": [{"id": "a", "type": "tool_call", "tool": "t", "parameters": {"x": 1}}]}
    out = runtime("t").execute_proposal_obj(p, tool)
    assert out["results"][0]["output"] == {"tool": "t", "params": {"x": 1}}


def test_async_tool_raising_fails_the_action_and_terminal_error_is_terminal():
    async def bad(call_json):
        raise ValueError("boom")

    out = runtime("t").execute_proposal_obj(proposal("t"), bad)
    assert out["results"][0]["status"] == "failed"
    assert "ValueError: boom" in out["results"][0]["error"]

    async def terminal(call_json):
        raise car_runtime.TerminalToolError("stop")

    p = {"actions": [{"id": "a", "type": "tool_call", "tool": "t", "failure_behavior": "retry", "max_retries": 3}]}
    calls = []

    async def counting(call_json):
        calls.append(1)
        return await terminal(call_json)

    out = runtime("t").execute_proposal_obj(p, counting)
    assert out["results"][0]["status"] == "failed"
    assert out["results"][0].get("terminal") is True
    assert len(calls) == 1


def test_sync_call_from_inside_a_coroutine_still_awaits_async_tools():
    async def tool(call_json):
        await asyncio.sleep(0)
        return "ok"

    async def main():
        # The loop is blocked in this call: the tool runs on a private loop.
        return runtime("t").execute_proposal_obj(proposal("t"), tool)

    out = asyncio.run(main())
    assert out["results"][0]["output"] == "ok"


def test_execute_proposal_async_keeps_the_loop_ticking():
    """A concurrent task keeps running while the proposal runs; the tool waits
    until the ticker has ticked, so the proposal cannot finish without it."""
    ticks = []
    seen_by_tool = []

    def tool(call_json):
        # Runs in the worker thread: wait (bounded) for the loop to tick meanwhile.
        event.wait(timeout=30)
        seen_by_tool.append(len(ticks))
        return "done"

    async def ticker():
        while True:
            ticks.append(1)
            if len(ticks) >= 5:
                event.set()
            await asyncio.sleep(0.001)

    async def main():
        t = asyncio.create_task(ticker())
        try:
            return await runtime("t").execute_proposal_async(proposal("t"), tool)
        finally:
            t.cancel()

    event = threading.Event()
    out = json.loads(asyncio.run(main()))
    assert out["results"][0]["output"] == "done"
    assert seen_by_tool and seen_by_tool[0] >= 5


def test_async_tool_runs_on_the_callers_loop():
    loops = []

    async def tool(call_json):
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return {"ok": True}

    async def main():
        out = await runtime("t", "u").execute_proposal_obj_async(proposal("t", "u"), tool)
        return out, asyncio.get_running_loop()

    out, loop = asyncio.run(main())
    assert [r["status"] for r in out["results"]] == ["succeeded", "succeeded"]
    assert loops and all(lp is loop for lp in loops)


def test_async_tool_may_await_other_tasks_of_the_callers_loop():
    """The coroutine runs on the caller's loop, so it can wait on a future that loop resolves."""

    async def main():
        fut = asyncio.get_running_loop().create_future()

        async def tool(call_json):
            return await fut

        async def resolver():
            await asyncio.sleep(0.01)
            fut.set_result({"from": "loop"})

        r = asyncio.create_task(resolver())
        out = await runtime("t").execute_proposal_obj_async(proposal("t"), tool)
        await r
        return out

    out = asyncio.run(main())
    assert out["results"][0]["output"] == {"from": "loop"}


def test_async_tool_may_call_back_into_the_runtime():
    rt = runtime("t")

    async def tool(call_json):
        rt.state_set("seen", {"v": 1})
        return "ok"

    async def main():
        return await rt.execute_proposal_async(proposal("t"), tool)

    asyncio.run(main())
    assert rt.state_get_obj("seen") == {"v": 1}


def test_async_errors_are_the_same_exceptions():
    async def main():
        await runtime().execute_proposal_async("{not json", lambda c: None)

    with pytest.raises(car_runtime.CarInputError) as info:
        asyncio.run(main())
    assert info.value.code


def test_other_async_variants():
    rt = runtime("t")
    car_runtime.register_tool_handler(lambda c: 7)
    try:
        async def main():
            submitted = json.loads(await rt.submit_proposal_async(proposal("t")))
            sub_obj = await rt.submit_proposal_obj_async(proposal("t"))
            verified = json.loads(await rt.verify_proposal_async(proposal("t")))
            fresh = json.loads(await car_runtime.execute_async(proposal("x"), ["x"], lambda c: 1))
            plan = json.loads(await rt.proposal_plan_async(proposal("t")))
            applied = json.loads(await rt.proposal_apply_async(plan["plan_id"], lambda c: 2))
            mc = json.loads(await rt.simulate_monte_carlo_async(proposal("t"), config_json={"trials": 5, "seed": 1}))
            return submitted, sub_obj, verified, fresh, applied, mc

        submitted, sub_obj, verified, fresh, applied, mc = asyncio.run(main())
    finally:
        car_runtime.unregister_tool_handler()
    assert submitted["results"][0]["output"] == 7
    assert sub_obj["results"][0]["output"] == 7
    assert verified["valid"] is True
    assert fresh["results"][0]["output"] == 1
    assert applied["results"][0]["output"] == 2
    assert mc["trials"] == 5
