"""The UniFFI surface through its generated Python bindings: free functions,
errors with codes, and a CarRuntime whose tools are Python ToolHandlers."""
import json
import threading
import time

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
        if call["tool"] == "search":
            raise car.ToolError.ModelRetry("use plain keywords")
        if call["tool"] == "fetch":
            self.rt.tool_log(call_json, "info", "fetching", json.dumps({"n": 1}))
            return json.dumps("fetched")
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
    rt.register_tool("search")
    out = json.loads(rt.execute_proposal(json.dumps({"id": "mr", "actions": [
        {"id": "s", "type": "tool_call", "tool": "search", "failure_behavior": "retry", "max_retries": 3},
    ]}), tools, None, None))
    assert out["results"][0]["error"] == "model retry (1 of 2): use plain keywords", out
    assert sum(c["tool"] == "search" for c in tools.calls) == 1, "never retried by the engine"
    rt.register_tool("fetch")
    rt.execute_proposal(json.dumps({"id": "log", "actions": [{"id": "g", "type": "tool_call", "tool": "fetch"}]}),
                        tools, None, None)
    [log] = json.loads(rt.event_query('{"kinds": ["ToolLog"]}'))["events"]
    assert log["action_id"] == "g" and log["data"]["message"] == "fetching" and log["data"]["data"] == {"n": 1}, log
    assert rt.tool_cancelled('{"request_id": "r", "deadline": "2000-01-01T00:00:00Z"}') is True
    assert rt.tool_cancelled('{"request_id": "r"}') is False
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
    pumped(rt)
    strict()
    runs()
    print("uniffi python: ok")


def runs():
    """Run traces, cost by agent, metrics and retention (issue #23)."""
    rt = car.CarRuntime()
    run = json.loads(rt.runs_start(json.dumps({"intent": "x", "agent_id": "swift-agent"})))
    rt.runs_record_model_turn(json.dumps({"run_id": run["run_id"], "model_id": "m",
                                          "token_usage": {"input_tokens": 4, "output_tokens": 1}}))
    assert json.loads(rt.runs_complete(json.dumps({"run_id": run["run_id"], "outcome": {"status": "done"}})))["ok"]
    assert json.loads(rt.runs_list(None))["runs"][0]["status"] == "done"
    assert json.loads(rt.runs_get_trace(json.dumps({"run_id": run["run_id"]})))["run"]["turns"][0]["model_id"] == "m"
    assert json.loads(rt.event_cost_by_agent())[0]["tokens_in"] == 4
    assert json.loads(rt.metrics_summary())["runs"]["model_turns"] == 1
    assert json.loads(rt.event_retention(json.dumps({"max_events": 10})))["policy"] == {"max_events": 10}
    assert json.loads(rt.events_truncate(json.dumps({"max_events": 1})))["remaining"] == 1


def strict():
    """Unknown fields: a verify warning; refused with unknown_field in strict mode."""
    plan = json.dumps({"actions": [{"id": "a", "type": "state_write", "parameters": {"key": "k", "value": 1}},
                                   {"id": "b", "type": "state_read", "parameters": {"key": "k"},
                                    "dependecies": ["a"]}]})
    rt = car.CarRuntime()
    warned = [i["message"] for i in json.loads(rt.verify_proposal(plan))["issues"] if i["severity"] == "warning"]
    assert any("did you mean `dependencies`" in m for m in warned), warned
    assert rt.strict_fields() is False
    rt.set_strict_fields(True)
    try:
        rt.verify_proposal(plan)
    except car.CarError.Failed as e:
        assert e.code == "unknown_field", e.code
        assert "actions[1].dependecies" in e.msg
    else:
        raise AssertionError("expected CarError in strict mode")


class Pumped(car.ToolHandler):
    """Records the thread of each call; `nest` runs a proposal from inside a
    tool, `slow` sleeps."""

    def __init__(self, rt):
        self.rt = rt
        self.threads = []
        self.lock = threading.Lock()
        self.active = 0
        self.most_active = 0

    def call(self, call_json):
        call = json.loads(call_json)
        self.threads.append(threading.get_ident())
        if call["tool"] == "nest":
            inner = json.loads(self.rt.execute_proposal(json.dumps({"id": "inner", "actions": [
                {"id": "i", "type": "tool_call", "tool": "leaf"},
            ]}), self, None, None))
            return json.dumps({"inner": inner["results"][0]["output"]})
        if call["tool"] == "slow":
            with self.lock:
                self.active += 1
                self.most_active = max(self.most_active, self.active)
            time.sleep(0.5)
            with self.lock:
                self.active -= 1
        return json.dumps({"tool": call["tool"]})


def pumped(rt):
    for t in ("nest", "leaf", "slow"):
        rt.register_tool(t)
    tools = Pumped(rt)
    # Tool calls run on the thread that called execute_proposal, and a tool
    # may run a proposal of its own.
    out = json.loads(rt.execute_proposal(json.dumps({"id": "outer", "actions": [
        {"id": "n", "type": "tool_call", "tool": "nest"},
    ]}), tools, None, None))
    assert out["results"][0]["output"] == {"inner": {"tool": "leaf"}}, out
    assert tools.threads == [threading.get_ident()] * 2, tools.threads
    # Calls waiting behind a slow one move to other threads, so slow tools
    # still run side by side.
    out = json.loads(rt.execute_proposal(json.dumps({"id": "slow", "actions": [
        {"id": f"s{i}", "type": "tool_call", "tool": "slow"} for i in range(4)
    ]}), tools, None, None))
    assert all(r["status"] == "succeeded" for r in out["results"]), out
    assert tools.most_active >= 2, "slow tools ran one after another"


if __name__ == "__main__":
    main()
