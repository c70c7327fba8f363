"""The UniFFI surface through its generated Python bindings: free functions,
errors with codes, and a CarRuntime whose tools are Python ToolHandlers."""
import json

import car_runtime_uniffi as car


class Tools(car.ToolHandler):
    def __init__(self, rt):
        self.rt = rt
        self.calls = []

    def call(self, call_json):
        call = json.loads(call_json)
        self.calls.append(call)
        if call["tool"] == "deploy":
            self.rt.state_set("seen", json.dumps(call["params"]["env"]), None)  # re-entrant
            return json.dumps({"deployed": call["params"]["env"]})
        if call["tool"] == "flaky":
            raise car.ToolError.Failed("flaky tool failed")
        raise car.ToolError.Terminal("card charged twice")


def main():
    assert car.protocol_version() == 3
    assert car.client_version()
    p = json.loads(car.normalize_proposal('{"actions":[{"type":"tool_call","tool":"x"}]}'))
    assert p["actions"][0]["max_retries"] == 3
    try:
        car.normalize_proposal('{"actions":[{"type":"tool_call"}]}')
    except car.CarError.Failed as e:
        assert e.code == "missing_field", e.code
        assert "actions[0].tool" in e.msg
    else:
        raise AssertionError("expected CarError")
    v = json.loads(car.verify('{"actions":[{"id":"a","type":"tool_call","tool":"x"}]}', None, ["y"], None, None))
    assert v["valid"] is False

    rt = car.CarRuntime()
    rt.register_tool_schema('{"name":"deploy","parameters":{"type":"object","required":["env"]}}')
    rt.register_tool("flaky")
    rt.register_tool("fatal")
    tools = Tools(rt)
    out = json.loads(rt.execute_proposal(json.dumps({"id": "p", "actions": [
        {"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {"env": "prod"}},
        {"id": "f", "type": "tool_call", "tool": "flaky", "failure_behavior": "skip"},
    ]}), tools, None, None))
    by = {r["action_id"]: r for r in out["results"]}
    assert by["d"]["output"] == {"deployed": "prod"}
    assert by["f"]["status"] == "skipped" and "flaky tool failed" in by["f"]["error"]  # skip after a failure
    assert json.loads(rt.state_get("seen", None)) == "prod"
    rt.state_set("k", "1", None)
    out = json.loads(rt.execute_proposal(json.dumps({"id": "p2", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 2}},
        {"id": "t", "type": "tool_call", "tool": "fatal", "state_dependencies": ["k"]},
    ]}), tools, None, None))
    by = {r["action_id"]: r for r in out["results"]}
    assert by["t"]["terminal"] is True and by["w"]["rolled_back"] is True
    assert json.loads(rt.state_get("k", None)) == 1
    try:
        rt.permission_set_tier("root")
    except car.CarError.Failed as e:
        assert e.code
    else:
        raise AssertionError("expected CarError")
    print("uniffi python: ok")


if __name__ == "__main__":
    main()
