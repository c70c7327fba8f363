"""Live approvals from Python: an approver callback attached with
``on_approval`` is told of each pending approval and resolves it with
``approval_resolve``; the held action then runs (allow) or is rejected with
the reason (anything else); an unanswered approval is denied at its
deadline; without an approver an ask is rejected naming the key."""
import json
import threading

import car_runtime as car


def deploy(n):
    return {"id": "p", "actions": [{"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {"n": n}}]}


def runtime(tmp_path, extra=None):
    rt = car.CarRuntime()
    rt.register_tool("deploy")
    rt.set_permissions({"ask": [{"tool": "deploy"}], **(extra or {})}, str(tmp_path))
    return rt


def test_a_callback_approver_allows_and_denies_held_actions(tmp_path):
    rt = runtime(tmp_path)
    answers = iter([("allow", "reviewed"), ("deny", "not during the freeze"), ("maybe", "unclear")])
    events = []

    def approver(event_json):
        ev = json.loads(event_json)
        events.append(ev)
        if ev["event"] == "pending":
            decision, reason = next(answers)
            rt.approval_resolve(ev["key"], decision, reason)

    cid = rt.on_approval(approver)
    ran = []
    out = json.loads(rt.execute_proposal(deploy(1), lambda c: ran.append(c) or {"ok": True}))
    assert out["results"][0]["status"] == "succeeded", out
    assert len(ran) == 1
    for n, reason in [(2, "not during the freeze"), (3, "unclear")]:
        out = json.loads(rt.execute_proposal(deploy(n), lambda c: ran.append(c) or {}))
        r = out["results"][0]
        assert r["status"] == "rejected" and "was denied" in r["error"] and reason in r["error"], r
    assert len(ran) == 1
    pending = [e for e in events if e["event"] == "pending"]
    assert [e["tool"] for e in pending] == ["deploy"] * 3 and all("deadline" in e for e in pending)
    assert json.loads(rt.approvals_pending())["pending"] == []

    # Detached: back to rejecting with the key, recorded for the next submission.
    assert rt.remove_approval_callback(cid)
    out = json.loads(rt.execute_proposal(deploy(4), lambda c: {}))
    key = json.loads(rt.approvals_pending())["pending"][0]["key"]
    assert out["results"][0]["status"] == "rejected" and key in out["results"][0]["error"]
    resolved = json.loads(rt.approval_resolve(key, "allow", "ok"))
    assert resolved["applied"] is True
    out = json.loads(rt.execute_proposal(deploy(4), lambda c: {}))
    assert out["results"][0]["status"] == "succeeded"


def test_an_approval_resolved_from_another_thread_and_the_deadline(tmp_path):
    rt = runtime(tmp_path, {"approval_timeout_ms": 200})
    keys = []
    got = threading.Event()

    def approver(event_json):
        ev = json.loads(event_json)
        if ev["event"] == "pending":
            keys.append(ev["key"])
            got.set()

    rt.on_approval(approver)

    def answer():
        assert got.wait(30)
        rt.approval_resolve(keys[0], "allow", "from the ops thread")

    t = threading.Thread(target=answer)
    t.start()
    out = json.loads(rt.execute_proposal(deploy(1), lambda c: {}))
    t.join()
    assert out["results"][0]["status"] == "succeeded", out

    # Nobody answers the next one: denied at the deadline; a late answer does not apply.
    out = json.loads(rt.execute_proposal(deploy(2), lambda c: {}))
    r = out["results"][0]
    assert r["status"] == "rejected" and "deadline passed" in r["error"], r
    late = json.loads(rt.approval_resolve(keys[-1], "allow", "late"))
    assert late["applied"] is False and late["by"] == "timeout"


def test_approvals_methods_need_an_approvals_store():
    rt = car.CarRuntime()
    try:
        rt.approvals_pending()
    except car.CarError as e:
        assert e.code == "approvals_not_configured"
    else:  # pragma: no cover
        raise AssertionError("expected approvals_not_configured")
