"""Run traces, cost by agent, the metrics rollup, retention and truncation
through the Python binding (issue #23)."""
import json
import tempfile

import pytest

import car_runtime as car


def test_a_run_traces_its_turns_and_proposals_and_is_kept_on_disk():
    d = tempfile.mkdtemp(prefix="car-py-runs-")
    rt = car.CarRuntime()
    rt.register_tool("t")
    rt.set_runs_dir(d)
    run = json.loads(rt.runs_start({"intent": "answer", "agent_id": "py-agent"}))
    assert run["agent_id"] == "py-agent"
    rid = run["run_id"]
    rt.runs_record_model_turn({"run_id": rid, "turn_index": 1, "assistant_text": "calling t",
                               "requested_tool_calls": [{"id": "1", "name": "t", "arguments": {}}],
                               "model_id": "m", "token_usage": {"input_tokens": 10, "output_tokens": 3, "cost_usd": 0.5},
                               "duration_ms": 7})
    rt.execute_proposal(json.dumps({"id": "p1", "actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}),
                        lambda call: "{}")
    assert json.loads(rt.runs_complete({"run_id": rid, "outcome": {"status": "success", "summary": "ok"}}))["ok"]
    trace = json.loads(rt.runs_get_trace({"run_id": rid}))
    assert trace["run"]["proposals"] == ["p1"] and trace["run"]["status"] == "success"
    assert {"RunStarted", "RunModelTurn", "ActionSucceeded", "RunCompleted"} <= {e["kind"] for e in trace["events"]}
    other = car.CarRuntime()
    other.set_runs_dir(d)
    assert json.loads(other.runs_list())["runs"][0]["run_id"] == rid
    assert json.loads(rt.event_cost_by_agent()) == [
        {"agent": "py-agent", "calls": 1, "tokens_in": 10, "tokens_out": 3, "cost_usd": 0.5}]
    m = json.loads(rt.metrics_summary())
    assert m["actions"]["succeeded"] == 1 and m["cost_usd"] == 0.5
    # Retention (set and read) and a one-off truncation.
    assert json.loads(rt.event_retention()) == {"policy": {}}
    set_ = json.loads(rt.event_retention({"max_events": 100}))
    assert set_["policy"] == {"max_events": 100}
    out = json.loads(rt.events_truncate({"max_events": 2}))
    assert out["remaining"] == 2 and out["removed"] > 0
    assert json.loads(rt.event_retention())["policy"] == {"max_events": 100}


def test_bad_run_requests_raise_typed_errors():
    rt = car.CarRuntime()
    with pytest.raises(car.CarInputError, match="intent"):
        rt.runs_start({})
    with pytest.raises(car.CarNotFoundError):
        rt.runs_complete({"run_id": "nope", "outcome": {"status": "done"}})
