"""The UniFFI surface through its generated Python bindings."""
import json

import car_runtime_uniffi as car


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
    print("uniffi python: ok")


if __name__ == "__main__":
    main()
