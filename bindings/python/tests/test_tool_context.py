"""ModelRetry: a tool says the model called it wrongly. The result tells the
model, the engine never retries it, and a call chain gets two."""
import json

import car_runtime


def test_model_retry_is_reported_not_retried_and_bounded():
    rt = car_runtime.CarRuntime()
    rt.register_tool("search")
    calls = []

    def tool(call_json):
        call = json.loads(call_json)
        calls.append(call)
        if "AND" in call["params"]["q"]:
            raise car_runtime.ModelRetry("use plain keywords")
        return {"hits": 1}

    def run(q):
        p = {"actions": [{"id": "s", "type": "tool_call", "tool": "search", "parameters": {"q": q},
                          "failure_behavior": "retry", "max_retries": 3}]}
        return json.loads(rt.execute_proposal(p, tool))["results"][0]

    first = run("a AND b")
    assert first["status"] == "failed" and first["error"] == "model retry (1 of 2): use plain keywords", first
    assert len(calls) == 1, "never retried by the engine"
    assert run("a AND c")["error"].startswith("model retry (2 of 2): ")
    assert run("a AND d")["error"].startswith("model retry limit reached")
    assert run("plain")["status"] == "succeeded"
    assert run("a AND e")["error"].startswith("model retry (1 of 2): "), "a success starts the chain again"
    assert issubclass(car_runtime.ModelRetry, Exception) and car_runtime.ModelRetry.__module__ == "car_runtime"


def test_a_tool_logs_into_the_event_log_through_its_call():
    rt = car_runtime.CarRuntime()
    rt.register_tool("fetch")

    def tool(call_json):
        rt.tool_log(call_json, "info", "fetching", {"url": "https://example.test"})
        rt.tool_log(json.loads(call_json), "debug", "as a dict too")
        return "ok"

    out = json.loads(rt.execute_proposal({"actions": [{"id": "f", "type": "tool_call", "tool": "fetch"}]}, tool))
    assert out["results"][0]["status"] == "succeeded"
    logs = json.loads(rt.event_query({"kinds": ["ToolLog"]}))["events"]
    assert sorted(e["data"]["level"] for e in logs) == ["debug", "info"]
    info = [e for e in logs if e["data"]["level"] == "info"][0]
    assert info["action_id"] == "f" and info["data"]["tool"] == "fetch"
    assert info["data"]["data"] == {"url": "https://example.test"}
    try:
        rt.tool_log({"request_id": "req-1"}, "loud", "m")
    except car_runtime.CarInputError as e:
        assert "level" in str(e)
    else:
        raise AssertionError("a bad level is refused")



def test_a_tool_past_its_deadline_is_told_it_was_given_up_on():
    import time
    rt = car_runtime.CarRuntime()
    rt.register_tool("slow")
    seen = {}

    def tool(call_json):
        call = json.loads(call_json)
        seen["deadline"] = call.get("deadline")
        start = time.monotonic()
        while not rt.tool_cancelled(call_json) and time.monotonic() - start < 3:
            time.sleep(0.005)
        seen["waited"] = time.monotonic() - start
        return "late"

    out = json.loads(rt.execute_proposal({"actions": [
        {"id": "s", "type": "tool_call", "tool": "slow", "timeout_ms": 50, "failure_behavior": "skip"}]}, tool))
    assert "timed out" in out["results"][0]["error"], out
    assert seen["deadline"] and seen["waited"] < 2, seen
    assert rt.tool_cancelled({"request_id": "r"}) is False
