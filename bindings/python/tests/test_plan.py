"""The plan/apply gate on the execution path through the Python binding:
plan (nothing runs), decide each ask with a scope, apply; and the admission
document read back."""

import json

import pytest

import car_runtime


def make(tmp_path):
    rt = car_runtime.CarRuntime()
    rt.register_tool("migrate")
    rt.register_tool("lookup")
    rt.set_permissions({"ask": [{"tool": "migrate"}], "deny": [{"tool": "lookup"}], "preset": "open"}, str(tmp_path))
    return rt


def test_plan_decide_apply(tmp_path):
    rt = make(tmp_path)
    calls = []

    def tool(call):
        calls.append(json.loads(call)["params"])
        return {"ok": True}

    proposal = {"actions": [
        {"id": "a", "type": "tool_call", "tool": "migrate", "parameters": {"env": "a"}, "failure_behavior": "skip"},
        {"id": "b", "type": "tool_call", "tool": "migrate", "parameters": {"env": "b"}, "failure_behavior": "skip"},
        {"id": "l", "type": "tool_call", "tool": "lookup", "failure_behavior": "skip"},
    ]}
    before = rt.event_count()
    plan = json.loads(rt.proposal_plan(proposal))
    assert rt.event_count() == before and calls == []
    items = {i["action_id"]: i for i in plan["items"]}
    assert (items["a"]["verdict"], items["a"]["layer"]) == ("ask", "ask-rule")
    assert items["a"]["approval_key"].startswith("migrate:")
    assert (items["l"]["verdict"], items["l"]["layer"]) == ("deny", "deny-rule")
    with pytest.raises(car_runtime.CarError):
        rt.proposal_decide(plan["plan_id"], "l", "allow")
    # `always` needs an approvals store to keep its rule: without one it is
    # refused, never downgraded.
    bare = car_runtime.CarRuntime()
    bare.register_tool("migrate")
    bare.set_permissions({"ask": [{"tool": "migrate"}], "preset": "open"})
    bare_plan = json.loads(bare.proposal_plan({"actions": [proposal["actions"][0]]}))
    with pytest.raises(car_runtime.CarError) as e:
        bare.proposal_decide(bare_plan["plan_id"], "a", "allow", "always")
    assert e.value.code == "always_scope_unavailable"
    rt.proposal_decide(plan["plan_id"], "a", "allow", "once", "reviewed")
    rt.proposal_decide(plan["plan_id"], "b", "deny", "once", "no")
    out = json.loads(rt.proposal_apply(plan["plan_id"], tool))
    assert [r["status"] for r in out["results"]] == ["succeeded", "rejected", "rejected"]
    assert calls == [{"env": "a"}]
    with pytest.raises(car_runtime.CarError):
        rt.proposal_apply(plan["plan_id"], tool)


def test_admission_config_reads_back(tmp_path):
    rt = make(tmp_path)
    doc = json.loads(rt.admission_config())
    assert doc["deny"] == [{"tool": "lookup"}] and doc["preset"] == "open"
