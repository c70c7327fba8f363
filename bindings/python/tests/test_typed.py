"""Dict results beside JSON text; exceptions of the car_runtime module that pickle."""
import json
import pickle

import pytest

import car_runtime

P = {"actions": [{"id": "a", "type": "tool_call", "tool": "t", "parameters": {"x": 1}}]}


def test_obj_variants_equal_the_parsed_text():
    rt = car_runtime.CarRuntime()
    rt.register_tool("t")
    rt.state_set("k", [1, 2])
    text = json.loads(rt.execute_proposal(P, lambda c: {"ok": 1}))
    obj = rt.execute_proposal_obj(P, lambda c: {"ok": 1})
    assert obj["results"][0]["output"] == text["results"][0]["output"] == {"ok": 1}
    assert obj["results"][0]["status"] == "succeeded"
    assert set(obj) == set(text)
    assert rt.verify_proposal_obj(P) == json.loads(rt.verify_proposal(P))
    assert rt.list_tools_obj() == json.loads(rt.list_tools())
    assert rt.state_get_obj("k") == [1, 2]
    assert rt.state_get_obj("absent") is None
    assert rt.state_snapshot_obj() == {"k": [1, 2]}
    assert rt.event_query_obj()["count"] == rt.event_count()
    assert rt.list_policies_obj() == []
    assert car_runtime.verify_obj(P, None, ["t"]) == json.loads(car_runtime.verify(P, None, ["t"]))
    assert car_runtime.normalize_proposal_obj(P)["actions"][0]["failure_behavior"] == "abort"
    assert car_runtime.simulate_obj({"actions": [{"type": "state_write", "parameters": {"key": "a", "value": 2}}]}) == json.loads(
        car_runtime.simulate({"actions": [{"type": "state_write", "parameters": {"key": "a", "value": 2}}]})
    )
    assert car_runtime.execute_obj(P, ["t"], lambda c: 3)["results"][0]["output"] == 3
    assert car_runtime.optimize_obj(P)["actions"][0]["id"] == "a"
    assert "consistent" in car_runtime.transaction_check_obj(P)


def test_tool_call_shape_matches_the_typed_dict():
    seen = []

    def tool(call_json):
        seen.append(json.loads(call_json))
        return None

    car_runtime.execute(P, ["t"], tool)
    required = car_runtime.ToolCall.__required_keys__
    optional = car_runtime.ToolCall.__optional_keys__
    assert required | optional == set(car_runtime.ToolCall.__annotations__)
    # Every required key, and the optional ones only under isolation.
    assert set(seen[0]) == required, (set(seen[0]), required)
    assert optional == {"cwd", "isolation"}
    assert seen[0]["attempt"] == 1


def test_result_keys_are_declared_in_the_typed_dicts():
    out = car_runtime.execute_obj(P, ["t"], lambda c: 1)
    declared = set(car_runtime.ProposalResult.__annotations__)
    assert set(out) <= declared
    action_keys = set(car_runtime.ActionResult.__annotations__)
    assert set(out["results"][0]) <= action_keys
    assert set(out["cost"]) <= set(car_runtime.CostSummary.__annotations__)
    assert car_runtime.ActionResult.__required_keys__ == {"action_id", "status"}


def test_exceptions_live_in_car_runtime_and_pickle():
    with pytest.raises(car_runtime.CarInputError) as info:
        car_runtime.verify("{not json")
    e = info.value
    assert type(e).__module__ == "car_runtime"
    assert type(e).__qualname__ == "CarInputError"
    assert "car_runtime.CarInputError" in repr(type(e))
    assert isinstance(e.details, dict)
    assert e.family == "input"
    assert e.code
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is car_runtime.CarInputError
    assert (back.code, back.message, back.family, back.details) == (e.code, e.message, e.family, e.details)
    assert str(back) == str(e) == e.message
    assert isinstance(back, car_runtime.CarError)


def test_details_is_a_dict_with_the_argument_name():
    with pytest.raises(car_runtime.CarInputError) as info:
        car_runtime.permission_evaluate(P, "no_such_tier")
    assert isinstance(info.value.details, dict)


def test_every_family_class_pickles():
    for cls in (car_runtime.CarError, car_runtime.CarConfigError, car_runtime.CarNotFoundError,
                car_runtime.CarRuntimeError, car_runtime.TerminalToolError):
        e = cls("m") if cls is car_runtime.TerminalToolError else cls("m", "some_code", None, {"a": 1})
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and str(back) == "m"
        if cls is not car_runtime.TerminalToolError:
            assert back.code == "some_code" and back.details == {"a": 1}
            assert back.family == e.family


def test_no_tool_handler_is_a_runtime_error_with_code():
    car_runtime.unregister_tool_handler()
    with pytest.raises(car_runtime.CarRuntimeError) as info:
        car_runtime.CarRuntime().submit_proposal(P)
    assert info.value.code == "no_tool_handler"
    assert info.value.details == {}


def test_register_tool_handler_accepts_fn_keyword():
    car_runtime.register_tool_handler(fn=lambda c: 5)
    try:
        rt = car_runtime.CarRuntime()
        rt.register_tool("t")
        assert rt.submit_proposal_obj(P)["results"][0]["output"] == 5
    finally:
        car_runtime.unregister_tool_handler()
