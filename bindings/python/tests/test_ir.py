import json

import pytest

import car_runtime


def test_versions():
    assert car_runtime.protocol_version() == 3
    assert car_runtime.__version__ == car_runtime.client_version()


def test_normalize_fills_defaults_from_text_or_dict():
    for arg in ('{"actions":[{"type":"tool_call","tool":"x"}]}', {"actions": [{"type": "tool_call", "tool": "x"}]}):
        p = json.loads(car_runtime.normalize_proposal(arg))
        a = p["actions"][0]
        assert p["source"] == "unknown" and len(p["id"]) == 12
        assert a["max_retries"] == 3 and a["failure_behavior"] == "abort"
        assert a["reversibility"] == "irreversible" and a["invocation_mode"] == "one_shot"


def test_errors_carry_stable_codes_and_paths():
    with pytest.raises(car_runtime.CarInputError) as e:
        car_runtime.normalize_proposal({"actions": [{"type": "tool_call", "tool": "x", "failure_behavior": "redo"}]})
    assert e.value.code == "invalid_document"
    assert e.value.family == "input"
    assert "actions[0].failure_behavior" in e.value.message
    assert isinstance(e.value, car_runtime.CarError)
    with pytest.raises(car_runtime.CarError) as e:
        car_runtime.normalize_proposal({"actions": [{"type": "tool_call"}]})
    assert e.value.code == "missing_field"
    assert "actions[0].tool" in str(e.value)
