"""Unknown fields: `verify` warns of each (path and suggestion), strict mode
refuses the proposal with CarInputError `unknown_field` and runs nothing."""
import json

import pytest

import car_runtime

PLAN = {"actions": [
    {"id": "a", "type": "tool_call", "tool": "t"},
    {"id": "b", "type": "tool_call", "tool": "t", "dependecies": ["a"]},
]}


def unknown_warnings(result):
    return [i for i in json.loads(result)["issues"]
            if i["severity"] == "warning" and i["message"].startswith("unknown field")]


def test_verify_warns_with_the_path_and_the_field_meant():
    for out in (car_runtime.verify(PLAN), car_runtime.CarRuntime().verify_proposal(PLAN)):
        (w,) = unknown_warnings(out)
        assert w["action_id"] == "b"
        assert w["message"] == ("unknown field `dependecies` at actions[1].dependecies (ignored); "
                                "did you mean `dependencies`?")
    # Warnings leave a proposal valid.
    assert json.loads(car_runtime.verify(PLAN))["valid"] is True


def test_strict_mode_refuses_with_a_typed_error_and_runs_nothing():
    rt = car_runtime.CarRuntime()
    rt.register_tool_schema({"name": "t", "parameters": {"type": "object"}})
    ran = []

    def tool(call_json):
        ran.append(json.loads(call_json)["tool"])
        return {}

    assert rt.strict_fields() is False
    rt.execute_proposal(PLAN, tool)
    assert ran == ["t", "t"]
    rt.set_strict_fields(True)
    assert rt.strict_fields() is True
    for call in (lambda: rt.execute_proposal(PLAN, tool), lambda: rt.verify_proposal(PLAN),
                 lambda: rt.proposal_plan(PLAN)):
        with pytest.raises(car_runtime.CarInputError) as e:
            call()
        assert e.value.code == "unknown_field"
        assert e.value.details == {"path": "actions[1].dependecies", "field": "dependecies"}
        assert "did you mean `dependencies`" in e.value.message
    assert ran == ["t", "t"], "nothing ran in strict mode"
    rt.set_strict_fields(False)
    rt.execute_proposal(PLAN, tool)
    assert len(ran) == 4
