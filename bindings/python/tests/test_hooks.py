"""Host hooks and can_use_tool (`CarRuntime.set_permission_hooks`): Python
functions, sync or async, take part in the permission chain; a raise or an
unrecognised answer denies; a substituted input is checked by later layers
and is what the tool receives."""
import asyncio
import json

import car_runtime as car

PLAN = {
    "actions": [
        {"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "ls"}, "failure_behavior": "skip"}
    ]
}


def shell_runtime(config=None):
    rt = car.CarRuntime()
    rt.register_tool("shell")
    if config is not None:
        rt.set_permissions(config)
    return rt


def run(rt, plan=PLAN):
    seen = []

    def tool(call_json):
        seen.append(json.loads(call_json)["params"])
        return {}

    out = json.loads(rt.execute_proposal(plan, tool))
    return out["results"][0], seen


def test_a_hook_returning_deny_refuses_and_the_tool_never_runs():
    rt = shell_runtime()
    calls = []

    def hook(tool, input):
        calls.append((tool, input))
        return "deny"

    rt.set_permission_hooks([hook])
    result, seen = run(rt)
    assert result["status"] == "rejected", result
    assert seen == []
    assert calls == [("shell", {"command": "ls"})]


def test_a_raising_hook_or_an_unrecognised_answer_denies():
    def boom(tool, input):
        raise RuntimeError("boom")

    for hook in [boom, lambda t, i: "yes", lambda t, i: 1, lambda t, i: {"modified_input": "x"}, lambda t, i: {1, 2}]:
        rt = shell_runtime()
        rt.set_permission_hooks([hook])
        result, seen = run(rt)
        assert result["status"] == "rejected", result
        assert seen == []
    rt = shell_runtime()
    rt.set_permission_hooks(can_use_tool=boom)
    result, seen = run(rt)
    assert result["status"] == "rejected", result
    assert seen == []


def test_a_passing_or_allowing_hook_lets_the_call_run():
    for answer in [None, "allow"]:
        rt = shell_runtime()
        rt.set_permission_hooks([lambda t, i, a=answer: a])
        result, seen = run(rt)
        assert result["status"] == "succeeded", result
        assert seen == [{"command": "ls"}]


def test_an_async_hook_works():
    async def deny(tool, input):
        await asyncio.sleep(0.01)
        return "deny"

    async def substitute(tool, input):
        await asyncio.sleep(0)
        return {"modified_input": {"command": "echo async"}}

    rt = shell_runtime()
    rt.set_permission_hooks([deny])
    result, seen = run(rt)
    assert result["status"] == "rejected", result
    assert seen == []

    rt = shell_runtime()
    rt.set_permission_hooks([substitute])
    result, seen = run(rt)
    assert result["status"] == "succeeded", result
    assert seen == [{"command": "echo async"}]


def test_an_async_hook_works_when_called_from_a_running_event_loop():
    async def substitute(tool, input):
        await asyncio.sleep(0)
        return {"modified_input": {"command": "echo loop"}}

    rt = shell_runtime()
    rt.set_permission_hooks([substitute])

    async def main():
        return run(rt)

    result, seen = asyncio.run(main())
    assert result["status"] == "succeeded", result
    assert seen == [{"command": "echo loop"}]


def test_a_substituted_input_reaches_the_tool():
    rt = shell_runtime()
    rt.set_permission_hooks([lambda t, i: {"modified_input": {"command": "echo safe"}}])
    result, seen = run(rt)
    assert result["status"] == "succeeded", result
    assert seen == [{"command": "echo safe"}]


def test_a_deny_rule_sees_the_substituted_input():
    rt = shell_runtime({"shell": {"deny": ["touch **"]}, "preset": "open"})
    rt.set_permission_hooks([lambda t, i: {"modified_input": {"command": "touch x"}}])
    result, seen = run(rt)
    assert result["status"] == "rejected", result
    assert seen == []
    # Without the substitution the same call runs.
    rt.set_permission_hooks([])
    result, seen = run(rt)
    assert result["status"] == "succeeded", result


def test_can_use_tool_allow_overrides_needs_approval():
    config = {"tools": [{"name": "deploy", "description": "", "parameters": {"type": "object"}, "needs_approval": True}]}
    plan = {"actions": [{"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {}, "failure_behavior": "skip"}]}
    rt = car.CarRuntime()
    rt.register_tool("deploy")
    rt.set_permissions(config)
    result, seen = run(rt, plan)
    assert result["status"] == "rejected", result
    assert seen == []

    rt.set_permission_hooks(can_use_tool=lambda tool, input: "allow" if tool == "deploy" else None)
    result, seen = run(rt, plan)
    assert result["status"] == "succeeded", result
    assert seen == [{}]

    # "ask" is not a can_use_tool answer: it denies.
    rt.set_permission_hooks(can_use_tool=lambda tool, input: "ask")
    result, seen = run(rt, plan)
    assert result["status"] == "rejected", result


def test_a_hook_may_call_back_into_the_runtime():
    rt = shell_runtime()
    rt.state_set("mode", json.dumps("locked"))

    def hook(tool, input):
        return "deny" if json.loads(rt.state_get("mode")) == "locked" else None

    rt.set_permission_hooks([hook])
    result, _ = run(rt)
    assert result["status"] == "rejected", result
