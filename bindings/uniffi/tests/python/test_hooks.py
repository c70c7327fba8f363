"""Host permission hooks through the generated UniFFI Python bindings
(`CarRuntime.set_permission_hooks` with `PermissionHook` objects): a "deny"
refuses, an error or an unrecognised answer denies, a substituted input
reaches the tool and is checked by the deny rules, and can_use_tool "allow"
overrides a needs_approval tool."""
import json

import car_runtime_uniffi as car

PLAN = json.dumps(
    {"actions": [{"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "ls"}, "failure_behavior": "skip"}]}
)


class Tools(car.ToolHandler):
    def __init__(self):
        self.seen = []

    def call(self, call_json):
        self.seen.append(json.loads(call_json)["params"])
        return "{}"


class Hook(car.PermissionHook):
    def __init__(self, answer):
        self.answer = answer
        self.calls = []

    def decide(self, tool, input_json):
        self.calls.append((tool, json.loads(input_json)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def shell_runtime(config=None):
    rt = car.CarRuntime()
    rt.register_tool("shell")
    if config is not None:
        rt.set_permissions(json.dumps(config), None)
    return rt


def run(rt, plan=PLAN):
    tools = Tools()
    out = json.loads(rt.execute_proposal(plan, tools, None, None))
    return out["results"][0], tools.seen


def main():
    # A hook returning "deny" refuses; the tool never runs.
    rt = shell_runtime()
    hook = Hook('"deny"')
    rt.set_permission_hooks([hook], None)
    result, seen = run(rt)
    assert result["status"] == "rejected", result
    assert seen == []
    assert hook.calls == [("shell", {"command": "ls"})]

    # An error (declared or not) or an unrecognised answer denies.
    for answer in [car.HookError.Failed("no"), RuntimeError("boom"), "deny", '"yes"', "1", '{"modified_input": "x"}']:
        rt = shell_runtime()
        rt.set_permission_hooks([Hook(answer)], None)
        result, seen = run(rt)
        assert result["status"] == "rejected", (answer, result)
        assert seen == []
    rt = shell_runtime()
    rt.set_permission_hooks([], Hook(RuntimeError("boom")))
    result, seen = run(rt)
    assert result["status"] == "rejected", result

    # null and "allow" let the call run.
    for answer in ["null", '"allow"']:
        rt = shell_runtime()
        rt.set_permission_hooks([Hook(answer)], None)
        result, seen = run(rt)
        assert result["status"] == "succeeded", (answer, result)
        assert seen == [{"command": "ls"}]

    # A substituted input reaches the tool.
    rt = shell_runtime()
    rt.set_permission_hooks([Hook(json.dumps({"modified_input": {"command": "echo safe"}}))], None)
    result, seen = run(rt)
    assert result["status"] == "succeeded", result
    assert seen == [{"command": "echo safe"}]

    # A deny rule sees the substituted input.
    rt = shell_runtime({"shell": {"deny": ["touch **"]}, "preset": "open"})
    rt.set_permission_hooks([Hook(json.dumps({"modified_input": {"command": "touch x"}}))], None)
    result, seen = run(rt)
    assert result["status"] == "rejected", result
    assert seen == []

    # can_use_tool "allow" overrides a needs_approval tool; "ask" denies.
    config = {"tools": [{"name": "deploy", "description": "", "parameters": {"type": "object"}, "needs_approval": True}]}
    plan = json.dumps({"actions": [{"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {}, "failure_behavior": "skip"}]})
    rt = car.CarRuntime()
    rt.register_tool("deploy")
    rt.set_permissions(json.dumps(config), None)
    result, seen = run(rt, plan)
    assert result["status"] == "rejected", result
    rt.set_permission_hooks([], Hook('"allow"'))
    result, seen = run(rt, plan)
    assert result["status"] == "succeeded", result
    assert seen == [{}]
    rt.set_permission_hooks([], Hook('"ask"'))
    result, seen = run(rt, plan)
    assert result["status"] == "rejected", result
    print("uniffi hooks: ok")


if __name__ == "__main__":
    main()
