"""The plan/apply gate and approvals through the Python binding."""
import json

import pytest

import car_runtime as car

OPS = [
    {"operation_name": "write_file", "kind": "resource", "risk": "write"},
    {"operation_name": "read_file", "kind": "data_source", "risk": "read"},
]


def test_plan_items_are_decided_one_by_one_and_decisions_apply():
    calls = [
        {"call_id": "c1", "operation_name": "write_file", "input": {"path": "a"}},
        {"call_id": "c2", "operation_name": "read_file", "input": {"path": "a"}},
    ]
    out = json.loads(car.plan_build(calls, OPS))
    items = out["plan"]["items"]
    assert [i["decision"] for i in items] == ["ask", "allow"]
    assert items[0]["kind"] == "resource" and items[1]["kind"] == "data_source"
    decided = json.loads(car.plan_decide(out["plan"], items[0]["id"], {"decision": "deny", "reason": "not now"}))
    assert decided["item"]["decision"] == "deny"
    assert decided["tool_result"] is not None


def test_approvals_are_durable_and_fail_closed(tmp_path):
    assert json.loads(car.approvals_pending(str(tmp_path)))["pending"] == []
    with pytest.raises(car.CarError):
        car.approval_resolve(str(tmp_path), "write_file:nope", "allow", "")
