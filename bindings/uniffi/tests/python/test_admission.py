"""The admission conformance corpus (tests/conformance/admission/cases.json)
through the generated UniFFI Python bindings, set up case by case as the
Rust runner (tests/admission_conformance.rs) does: stub tools, policies,
policy files, a ledger, the admission document, an approvals directory
(unless ``approvals: false``) and an ApprovalListener; then per action the
status and the deciding layer (the newest AdmissionDecided event of the
action outside the compensation stage), what became of compensations, and
cost counters. Plus: permission_set_tier("read_only") refuses `rm -rf /`."""
import json
import pathlib
import shutil
import tempfile

import car_runtime_uniffi as car

CORPUS = json.loads(
    (pathlib.Path(__file__).resolve().parents[4] / "tests" / "conformance" / "admission" / "cases.json").read_text()
)


class Stub(car.ToolHandler):
    def __init__(self):
        self.calls = []

    def call(self, call_json):
        call = json.loads(call_json)
        self.calls.append(call)
        if call["params"].get("fail") is True:
            raise car.ToolError.Failed("stub failure")
        return json.dumps({"ok": True})


class Approver(car.ApprovalListener):
    def __init__(self, rt, mode):
        self.rt = rt
        self.mode = mode

    def on_event(self, event_json):
        ev = json.loads(event_json)
        if ev["event"] != "pending":
            return
        if self.mode == "approve":
            self.rt.approval_resolve(ev["key"], "allow", "conformance approver")
        elif self.mode == "deny":
            self.rt.approval_resolve(ev["key"], "deny", "conformance approver")
        # "timeout": never answers


def runtime_for(case, tmp):
    rt = car.CarRuntime()
    for t in CORPUS["tools"] + case.get("extra_tools", []):
        rt.register_tool_schema(json.dumps(t))
    for p in case.get("policies", []):
        rt.register_policy(p["name"], p["rule"], p.get("target"), p.get("key"), p.get("pattern"), p.get("value_json"), None)
    if case.get("policy_files"):
        pd = tmp / "policies"
        pd.mkdir()
        for name, text in case["policy_files"].items():
            (pd / name).write_text(text)
        rt.load_policies(str(pd))
    config = dict(case["config"])
    if "ledger" in case:
        path = tmp / "ledger.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in case["ledger"]))
        config["ledger_path"] = str(path)
    approvals = None if case.get("approvals") is False else str(tmp / "approvals")
    rt.set_permissions(json.dumps(config), approvals)
    if case.get("approver") is not None:
        rt.on_approval(Approver(rt, case["approver"]))
    return rt


def layer_of(events, action_id):
    # Newest first: the first event of the action outside the compensation stage.
    for e in events:
        if e.get("action_id") == action_id and e["data"].get("stage") != "compensation":
            return e["data"].get("layer") or "none"
    return "none"


def compensation_of(r):
    if r.get("compensated") is True:
        return "compensated"
    if isinstance(r.get("compensation_error"), str):
        return "refused"
    return "none"


def run_case(case):
    """The differences from the expectation, as text (empty when it conforms)."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="car-uniffi-admission-"))
    failures = []
    name = case["name"]
    try:
        rt = runtime_for(case, tmp)
        result = json.loads(rt.execute_proposal(json.dumps(case["proposal"]), Stub(), None, None))
        events_text = rt.event_query(json.dumps({"kinds": ["AdmissionDecided"]}))
        events = json.loads(events_text)["events"]
        got = [(r["action_id"], r["status"], layer_of(events, r["action_id"])) for r in result["results"]]
        want = [(e["id"], e["status"], e["layer"]) for e in case["expected"]]
        if got != want:
            failures.append(f"{name}: got {got}, want {want}; results {result['results']}")
        for action_id, what in case.get("compensation", {}).items():
            r = next(r for r in result["results"] if r["action_id"] == action_id)
            if compensation_of(r) != what:
                failures.append(f"{name}: compensation of {action_id} is {compensation_of(r)}, want {what}: {r}")
        for k, v in case.get("cost", {}).items():
            if result["cost"].get(k) != v:
                failures.append(f"{name}: cost.{k} is {result['cost'].get(k)}, want {v}")
        for secret in ["rm -rf victim", "evil.test"]:
            if secret in events_text:
                failures.append(f"{name}: an AdmissionDecided event carries the parameter value `{secret}`")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return failures


def the_tier_is_enforced_in_process():
    rt = car.CarRuntime()
    rt.register_tool("shell")
    assert rt.permission_set_tier("read_only") == "read_only"
    tools = Stub()
    plan = {"id": "p", "actions": [{"id": "a", "type": "tool_call", "tool": "shell", "parameters": {"command": "rm -rf /"}}]}
    out = json.loads(rt.execute_proposal(json.dumps(plan), tools, None, None))
    assert out["results"][0]["status"] == "rejected", out
    assert tools.calls == [], tools.calls


def plan_decide_apply():
    tmp = tempfile.mkdtemp(prefix="car-uniffi-plan-")
    try:
        rt = car.CarRuntime()
        rt.register_tool("migrate")
        rt.set_permissions(json.dumps({"ask": [{"tool": "migrate"}], "preset": "open"}), tmp)
        assert json.loads(rt.admission_config())["ask"] == [{"tool": "migrate"}]
        assert json.loads(rt.mcp_status()) == {"servers": {}}, "no `mcp` section, no servers"
        tools = Stub()
        proposal = {"actions": [
            {"id": "a", "type": "tool_call", "tool": "migrate", "parameters": {"env": "a"}, "failure_behavior": "skip"},
            {"id": "b", "type": "tool_call", "tool": "migrate", "parameters": {"env": "b"}, "failure_behavior": "skip"},
        ]}
        plan = json.loads(rt.proposal_plan(json.dumps(proposal), None, None))
        assert [i["verdict"] for i in plan["items"]] == ["ask", "ask"], plan
        rt.proposal_decide(plan["plan_id"], "a", "allow", "once", "reviewed")
        out = json.loads(rt.proposal_apply(plan["plan_id"], tools))
        assert [r["status"] for r in out["results"]] == ["succeeded", "rejected"], out
        assert [c["params"] for c in tools.calls] == [{"env": "a"}], tools.calls
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    plan_decide_apply()
    cases = CORPUS["cases"]
    assert len(cases) >= 40, len(cases)
    failures = [f for case in cases for f in run_case(case)]
    assert not failures, f"{len(failures)} differences over {len(cases)} cases:\n" + "\n".join(failures)
    the_tier_is_enforced_in_process()
    print(f"uniffi admission: {len(cases)} cases ok; read_only refuses rm -rf /; plan, decide, apply")


if __name__ == "__main__":
    main()
