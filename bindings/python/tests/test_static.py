"""The stateless functions: verify, simulate, optimize, equivalent,
transaction_check, the permission classifiers, shell matching, the chain's
dry run, toolset hashes and presets."""
import json

import pytest

import car_runtime as car

DEPLOY = {
    "id": "p1",
    "actions": [
        {"id": "test", "type": "tool_call", "tool": "run_tests", "expected_effects": {"tests_passed": True}},
        {
            "id": "deploy",
            "type": "tool_call",
            "tool": "deploy",
            "parameters": {"env": "prod"},
            "preconditions": [{"key": "tests_passed", "operator": "eq", "value": True}],
            "state_dependencies": ["tests_passed"],
            "expected_effects": {"deployed": True},
        },
    ],
}


def test_verify_accepts_json_text_or_dict_and_orders_the_dag():
    for arg in (DEPLOY, json.dumps(DEPLOY)):
        r = json.loads(car.verify(arg))
        assert r["valid"] is True
        assert r["execution_levels"] == [["test"], ["deploy"]]
        assert r["simulated_state"] == {"tests_passed": True, "deployed": True}
        assert {c["name"] for c in r["evidence"]["checks"]} >= {"write_conflicts", "loop_detection"}


def test_verify_reports_missing_tools_and_resource_exhaustion():
    r = json.loads(car.verify(DEPLOY, None, ["run_tests"]))
    assert r["valid"] is False
    assert any("deploy" in i["message"] and i["action_id"] == "deploy" for i in r["issues"])
    r = json.loads(car.verify(DEPLOY, {}, None, 1))
    assert any(i["message"] == "excessive actions: 2 (limit 1)" for i in r["issues"])


def test_simulate_skips_blocked_actions_verify_does_not():
    gated = {"actions": [DEPLOY["actions"][1]]}
    assert json.loads(car.simulate(gated)) == {}
    assert json.loads(car.simulate(gated, {"tests_passed": True}))["deployed"] is True
    assert json.loads(car.verify(gated))["simulated_state"]["deployed"] is True


def test_optimize_and_equivalent():
    phantom = {"id": "p", "actions": [
        {"id": "a", "type": "tool_call", "tool": "x", "state_dependencies": ["never_written"]},
    ]}
    out = json.loads(car.optimize(phantom))
    assert out["actions"][0]["state_dependencies"] == []
    assert car.equivalent(DEPLOY, DEPLOY) is True
    other = {"actions": [{"id": "w", "type": "state_write", "parameters": {"key": "x", "value": 5}}]}
    assert car.equivalent(DEPLOY, other) is False


def test_transaction_check_flags_stale_assumptions():
    p = {"actions": [{"id": "a", "type": "tool_call", "tool": "x",
                      "assumptions": [{"key": "k", "read_version": 1}]}]}
    r = json.loads(car.transaction_check(p, {"k": 3}))
    assert r["consistent"] is False
    assert r["conflicts"][0]["kind"] == "stale_assumption"


def test_permission_classify_and_evaluate():
    r = json.loads(car.permission_classify(DEPLOY))
    assert [c["action_id"] for c in r["classifications"]] == ["test", "deploy"]
    assert r["declared_rollback_contract"] == "irreversible"
    d = json.loads(car.permission_evaluate(DEPLOY, "sandbox_edit"))["decisions"]
    assert {x["decision"] for x in d} <= {"allow", "needs_approval", "deny"}
    with pytest.raises(car.CarError) as e:
        car.permission_evaluate(DEPLOY, "root")
    assert e.value.code


def test_shell_matching_chain_dry_run_hash_and_presets():
    rules = {"allow": ["ls *", "git status"], "deny": ["rm -rf *"]}
    assert car.match_shell_command("ls -la", rules) == "allow"
    assert car.match_shell_command("ls; rm -rf /", rules) == "deny"
    assert car.match_shell_command("echo $(whoami)", rules) == "ask"
    r = json.loads(car.evaluate_permission({"preset": "standard"}, {"name": "shell", "risk": "execute"}, {"command": "ls"}))
    assert r["verdict"] == "ask" and r["decided_by"] == "ask-rule"
    h = car.toolset_hash([{"name": "a", "description": "d", "parameters": {"type": "object"}}])
    assert len(h) == 64 and h == car.toolset_hash('[{"name":"a","description":"d","parameters":{"type":"object"}}]')
    assert h != car.toolset_hash([{"name": "a", "description": "changed", "parameters": {"type": "object"}}])
    assert json.loads(car.compile_permission_preset("open")) == {"deny": [], "ask": []}
    with pytest.raises(car.CarError):
        car.compile_permission_preset("lenient")


def test_bad_json_text_names_the_argument():
    with pytest.raises(car.CarInputError) as e:
        car.verify("{not json")
    assert "proposal_json" in str(e.value)
