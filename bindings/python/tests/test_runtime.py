"""CarRuntime through realistic flows: tools, policies, state, execution
with Python tool callbacks (one- and two-argument), retries, terminal
failures, events and the registered handler."""
import json
import threading
import time

import pytest

import car_runtime as car


def proposal(*actions, pid="p1"):
    return {"id": pid, "actions": list(actions)}


def test_execute_with_a_one_argument_tool_fn_that_calls_back_into_the_runtime():
    rt = car.CarRuntime()
    rt.register_tool_schema({"name": "deploy", "parameters": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}})
    calls = []

    def tool(call_json):
        call = json.loads(call_json)
        calls.append(call)
        rt.state_set("seen_by_tool", json.dumps(call["params"]["env"]))  # re-entrant call: no deadlock
        return {"deployed": call["params"]["env"]}

    out = json.loads(rt.execute_proposal(proposal({"id": "a1", "type": "tool_call", "tool": "deploy", "parameters": {"env": "staging"}}), tool))
    assert out["results"][0]["status"] == "succeeded"
    assert out["results"][0]["output"] == {"deployed": "staging"}
    assert json.loads(rt.state_get("seen_by_tool")) == "staging"
    assert set(calls[0]) >= {"tool", "params", "action_id", "request_id", "timeout_ms", "session_id", "attempt"}
    assert calls[0]["attempt"] == 1
    assert out["cost"]["tool_calls"] == 1 and out["cost"]["actions_executed"] == 1


def test_two_argument_tool_fn_and_schema_rejection():
    rt = car.CarRuntime()
    rt.register_tool_schema({"name": "deploy", "parameters": {"type": "object", "required": ["env"]}})
    seen = []

    def tool(name, params_json):
        seen.append((name, json.loads(params_json)))
        return json.dumps({"ok": True})

    out = json.loads(rt.execute_proposal(proposal(
        {"id": "good", "type": "tool_call", "tool": "deploy", "parameters": {"env": "prod"}, "failure_behavior": "skip"},
        {"id": "bad", "type": "tool_call", "tool": "deploy", "parameters": {}, "failure_behavior": "skip"},
    ), tool))
    by_id = {r["action_id"]: r for r in out["results"]}
    assert seen == [("deploy", {"env": "prod"})]
    assert by_id["good"]["status"] == "succeeded"
    assert by_id["bad"]["status"] == "rejected"
    assert out["cost"]["actions_rejected"] == 1


def test_exceptions_fail_retries_count_attempts_and_terminal_aborts_with_rollback():
    rt = car.CarRuntime()
    rt.register_tool("flaky")
    rt.register_tool("fatal")
    attempts = []

    def tool(call_json):
        call = json.loads(call_json)
        if call["tool"] == "flaky":
            attempts.append(call["attempt"])
            if call["attempt"] < 3:
                raise RuntimeError("try again")
            return {"ok": call["attempt"]}
        raise car.TerminalToolError("card was charged twice")

    out = json.loads(rt.execute_proposal(proposal(
        {"id": "f", "type": "tool_call", "tool": "flaky", "failure_behavior": "retry", "max_retries": 3},
    ), tool))
    assert attempts == [1, 2, 3]
    assert out["results"][0]["status"] == "succeeded"
    assert out["cost"]["retries"] == 2

    rt.state_set("balance", "10")
    out = json.loads(rt.execute_proposal(proposal(
        {"id": "w", "type": "state_write", "parameters": {"key": "balance", "value": 0}},
        {"id": "t", "type": "tool_call", "tool": "fatal", "state_dependencies": ["balance"], "failure_behavior": "retry"},
        pid="p2",
    ), tool))
    by_id = {r["action_id"]: r for r in out["results"]}
    assert by_id["t"]["status"] == "failed" and by_id["t"]["terminal"] is True
    assert "card was charged twice" in by_id["t"]["error"]
    assert by_id["w"]["rolled_back"] is True
    assert json.loads(rt.state_get("balance")) == 10, "the aborted proposal's write was rolled back"


def test_policies_sessions_and_tiers():
    rt = car.CarRuntime()
    rt.register_tool("shell")
    rt.register_policy("no_rm", "deny_tool_param", "shell", "command", "rm -rf")
    assert json.loads(rt.list_policies()) == [{"name": "no_rm", "description": json.loads(rt.list_policies())[0]["description"]}]
    sid = rt.open_session()
    rt.register_policy("no_shell_here", "deny_tool", "shell", session_id=sid)
    ran = []
    tool = lambda call_json: ran.append(json.loads(call_json)["params"]) or "{}"
    out = json.loads(rt.execute_proposal(proposal(
        {"id": "a", "type": "tool_call", "tool": "shell", "parameters": {"command": "sudo rm -rf /"}},
    ), tool))
    assert out["results"][0]["status"] == "rejected" and ran == []
    out = json.loads(rt.execute_proposal(proposal({"id": "b", "type": "tool_call", "tool": "shell", "parameters": {"command": "ls"}}), tool, sid))
    assert out["results"][0]["status"] == "rejected"
    assert rt.close_session(sid) is True and rt.close_session(sid) is False
    assert rt.unregister_policy("no_rm") == 1 and rt.unregister_policy("no_rm") == 0
    with pytest.raises(car.CarError) as e:
        rt.register_policy("x", "allow_everything")
    assert e.value.code == "invalid_argument"
    assert rt.permission_get_tier() == "sandbox_edit"
    assert rt.permission_set_tier("full_access") == "full_access"
    with pytest.raises(car.CarError):
        rt.permission_set_tier("root")


def test_permission_set_tier_read_only_refuses_rm_rf_in_process():
    # Issue #18: the tier was not enforced by an in-process runtime.
    rt = car.CarRuntime()
    rt.register_tool("shell")
    assert rt.permission_set_tier("read_only") == "read_only"
    ran = []
    out = json.loads(rt.execute_proposal(proposal(
        {"id": "a", "type": "tool_call", "tool": "shell", "parameters": {"command": "rm -rf /"}},
    ), lambda c: ran.append(c) or {"ok": True}))
    assert out["results"][0]["status"] == "rejected", out
    assert ran == [], "the tool function was never called"
    events = json.loads(rt.event_query({"kinds": ["AdmissionDecided"]}))["events"]
    assert events and events[0]["data"]["layer"] == "tier" and events[0]["data"]["granted_tier"] == "read_only"


def test_state_tenants_events_and_chain():
    rt = car.CarRuntime()
    rt.state_set("k", {"v": 1})
    rt.state_set("k", "2", "acme")
    assert json.loads(rt.state_get("k")) == {"v": 1}
    assert json.loads(rt.state_get("k", "acme")) == 2
    assert rt.state_get("missing") == "null"
    assert rt.state_keys() == ["k"] and rt.state_keys("acme") == ["k"]
    assert rt.state_exists("k", "other") is False
    assert json.loads(rt.state_snapshot("acme")) == {"k": 2}
    before = rt.event_count()
    rt.enable_event_log_hash_chaining()
    rt.register_tool("t")
    rt.execute_proposal(proposal({"id": "a", "type": "tool_call", "tool": "t"}), lambda c: "1")
    assert rt.event_count() > 0
    q = json.loads(rt.event_query({"action_id": "a"}))
    assert q["count"] == len(q["events"]) > 0
    assert json.loads(rt.verify_event_log_chain()) == {"verified": rt.event_count() - before}
    assert rt.tool_poll("no-such-handle") is None and rt.tool_cancel("no-such-handle") is False
    tools = json.loads(rt.list_tools())
    assert [t["name"] for t in tools] == ["t"] and tools[0]["source"] == "user_defined"
    assert rt.unregister_tool("t") == 1


def test_verify_proposal_uses_runtime_state():
    rt = car.CarRuntime()
    p = proposal({"id": "d", "type": "tool_call", "tool": "deploy", "preconditions": [{"key": "ready", "value": True}]})
    assert json.loads(rt.verify_proposal(p))["valid"] is False
    rt.state_set("ready", "true")
    issues = json.loads(rt.verify_proposal(p))["issues"]
    assert not any("precondition" in i["message"] for i in issues)


def test_registered_handler_and_module_execute():
    rt = car.CarRuntime()
    rt.register_tool("echo")
    car.unregister_tool_handler()
    with pytest.raises(car.CarError) as e:
        rt.submit_proposal(proposal({"id": "a", "type": "tool_call", "tool": "echo"}))
    assert e.value.code == "no_tool_handler"
    car.register_tool_handler(lambda call_json: json.loads(call_json)["params"])
    out = json.loads(rt.submit_proposal(proposal({"id": "a", "type": "tool_call", "tool": "echo", "parameters": {"x": 1}})))
    assert out["results"][0]["output"] == {"x": 1}
    car.unregister_tool_handler()
    out = json.loads(car.execute(proposal({"id": "a", "type": "tool_call", "tool": "echo", "parameters": {"y": 2}}), ["echo"], lambda tool, params: params))
    assert out["results"][0]["output"] == {"y": 2}


def test_the_gil_is_released_while_rust_works():
    rt = car.CarRuntime()
    rt.register_tool("slow")
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    th = threading.Thread(target=ticker)
    th.start()
    try:
        # The tool itself sleeps in Python (releasing the GIL); the other thread keeps running throughout.
        rt.execute_proposal(proposal(*[{"id": f"a{i}", "type": "tool_call", "tool": "slow"} for i in range(5)]), lambda c: time.sleep(0.02) or "1")
    finally:
        stop.set()
        th.join()
    assert len(ticks) > 0, "another Python thread ran while Rust executed"


def test_agent_basics_and_permissions_with_durable_approvals(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("hello\n")
    rt = car.CarRuntime()
    rt.register_agent_basics(str(work))
    host = []
    out = json.loads(rt.execute_proposal(proposal(
        {"id": "r", "type": "tool_call", "tool": "read_file", "parameters": {"path": "notes.txt"}},
    ), lambda c: host.append(c) or "{}"))
    assert out["results"][0]["output"]["content"] == "hello\n" and host == []
    # The published built-ins: `shell` is not among them.
    names = [t["name"] for t in json.loads(rt.list_tools())]
    assert names == ["calculate", "edit_file", "find_files", "grep_files", "list_dir", "read_file", "write_file"]

    # A host `shell` (risk execute) asks under the standard preset.
    rt.register_tool("shell")
    approvals = str(tmp_path / "approvals")
    rt.set_permissions({"preset": "standard"}, approvals)
    call = proposal({"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "echo hi"}})
    shell = lambda c: host.append(json.loads(c)["params"]) or {"stdout": "hi\n"}
    out = json.loads(rt.execute_proposal(call, shell))
    assert out["results"][0]["status"] == "rejected" and host == []
    key = json.loads(car.approvals_pending(approvals))["pending"][0]["key"]
    assert key in out["results"][0]["error"]
    car.approval_resolve(approvals, key, "allow", "ok")
    out = json.loads(rt.execute_proposal(call, shell))
    assert out["results"][0]["status"] == "succeeded"
    assert out["results"][0]["output"]["stdout"] == "hi\n" and host == [{"command": "echo hi"}]
    rt.set_permissions(None)
    with pytest.raises(car.CarError):
        rt.set_permissions({"preset": "lenient"})


def test_threads_submit_proposals_concurrently():
    rt = car.CarRuntime()
    rt.register_tool("work")
    errors = []
    results = {}

    def submit(i):
        try:
            out = json.loads(rt.execute_proposal(
                proposal({"id": "a", "type": "tool_call", "tool": "work", "parameters": {"i": i}},
                         {"id": "w", "type": "state_write", "parameters": {"key": f"k{i}", "value": i}}, pid=f"p{i}"),
                lambda call_json: {"i": json.loads(call_json)["params"]["i"]}))
            results[i] = out
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 16
    for i, out in results.items():
        assert out["results"][0]["output"] == {"i": i}
        assert json.loads(rt.state_get(f"k{i}")) == i
