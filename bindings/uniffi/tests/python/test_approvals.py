"""Live approvals through the generated UniFFI Python bindings: an
ApprovalListener answers each pending approval with approval_resolve; the
held action runs on allow and is rejected with the reason otherwise."""
import json
import shutil
import tempfile

import car_runtime_uniffi as car


class Approver(car.ApprovalListener):
    def __init__(self, rt, answers):
        self.rt = rt
        self.answers = answers
        self.events = []

    def on_event(self, event_json):
        ev = json.loads(event_json)
        self.events.append(ev)
        if ev["event"] == "pending":
            decision, reason = self.answers.pop(0)
            self.rt.approval_resolve(ev["key"], decision, reason)


class Tools(car.ToolHandler):
    def __init__(self):
        self.calls = []

    def call(self, call_json):
        self.calls.append(call_json)
        return "{}"


def main():
    tmp = tempfile.mkdtemp()
    try:
        rt = car.CarRuntime()
        rt.register_tool("deploy")
        rt.set_permissions('{"ask":[{"tool":"deploy"}]}', tmp)
        approver = Approver(rt, [("allow", "reviewed"), ("deny", "not during the freeze")])
        cid = rt.on_approval(approver)
        tools = Tools()
        call = lambda n: json.dumps({"id": "p", "actions": [{"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {"n": n}}]})
        out = json.loads(rt.execute_proposal(call(1), tools, None, None))
        assert out["results"][0]["status"] == "succeeded", out
        out = json.loads(rt.execute_proposal(call(2), tools, None, None))
        r = out["results"][0]
        assert r["status"] == "rejected" and "not during the freeze" in r["error"], r
        assert len(tools.calls) == 1
        assert rt.remove_approval_callback(cid)
        out = json.loads(rt.execute_proposal(call(3), tools, None, None))
        key = json.loads(rt.approvals_pending())["pending"][0]["key"]
        assert out["results"][0]["status"] == "rejected" and key in out["results"][0]["error"]

        # Suspended instead (on_ask = "suspend"), then resumed once granted.
        rt.set_permissions('{"ask":[{"tool":"deploy"}],"on_ask":"suspend"}', tmp)
        before = len(tools.calls)
        out = json.loads(rt.execute_proposal(call(4), tools, None, None))
        assert out["status"] == "suspended", out
        sid = out["suspension"]["id"]
        assert [s["id"] for s in json.loads(rt.suspended_proposals())["suspended"]] == [sid]
        rt.approval_resolve(out["suspension"]["pending"][0]["approval_key"], "allow", "ok")
        done = json.loads(rt.resume_proposal(sid, tools))
        assert "status" not in done and done["results"][0]["status"] == "succeeded", done
        assert len(tools.calls) == before + 1
        assert json.loads(rt.suspended_proposals())["suspended"] == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("uniffi approvals: ok")


if __name__ == "__main__":
    main()
