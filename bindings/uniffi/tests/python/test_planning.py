"""The planning functions through the generated UniFFI Python bindings: a
seeded Monte Carlo run is reproducible and the same as the core's (the Python
and Node bindings call the same core function), ranking orders valid before
invalid, and the prediction functions answer."""
import json

import car_runtime_uniffi as car

P = {"id": "p", "actions": [
    {"id": "a", "type": "tool_call", "tool": "t", "parameters": {}},
    {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 1}, "dependencies": ["a"]},
]}


def main():
    cfg = json.dumps({"trials": 500, "seed": 7})
    one = json.loads(car.simulate_monte_carlo(json.dumps(P), None, json.dumps({"t": 0.25}), None, cfg))
    two = json.loads(car.simulate_monte_carlo(json.dumps(P), None, json.dumps({"t": 0.25}), None, cfg))
    assert one == two, "a seeded run is reproducible"
    assert one["trials"] == 500 and one["seed"] == 7, one
    # The write lands only when `t` succeeds: about a quarter of the trials.
    assert 0.15 < one["p_all_effects_landed"] < 0.35, one
    try:
        car.simulate_monte_carlo(json.dumps(P), None, json.dumps({"t": 1.5}), None, None)
        raise AssertionError("a rate above 1 must be refused")
    except car.CarError as e:
        assert "1.5" in str(e), e
    bad = {"id": "bad", "actions": [{"id": "x", "type": "tool_call", "tool": "t", "dependencies": ["ghost"]}]}
    ranked = json.loads(car.rank_proposals(json.dumps([bad, P]), None, None))
    assert [r["index"] for r in ranked] == [1, 0], ranked
    assert ranked[0]["valid"] and not ranked[1]["valid"], ranked
    preds = {"a": {"accuracy": 0.9, "effects": {"seen": True}}}
    sim = json.loads(car.simulate_with_predictions(json.dumps(P), json.dumps(preds), 0.5, None))
    assert "seen" in json.dumps(sim), sim
    print("uniffi planning: ok")


if __name__ == "__main__":
    main()
