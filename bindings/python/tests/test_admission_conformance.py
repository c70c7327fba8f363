"""The admission conformance corpus (tests/conformance/admission/cases.json)
through the Python binding's public API, set up case by case as the Rust
runner (tests/admission_conformance.rs) does: stub tools, policies, policy
files, a ledger, the admission document, an approvals directory (unless
``approvals: false``) and an approver; then per action the status and the
deciding layer (the newest AdmissionDecided event of the action outside the
compensation stage), what became of compensations, and cost counters."""
import json
import pathlib

import pytest

import car_runtime as car

CORPUS = json.loads(
    (pathlib.Path(__file__).resolve().parents[3] / "tests" / "conformance" / "admission" / "cases.json").read_text()
)
CASES = CORPUS["cases"]


def stub(call_json):
    call = json.loads(call_json)
    if call["params"].get("fail") is True:
        raise RuntimeError("stub failure")
    return {"ok": True}


def runtime_for(case, tmp):
    rt = car.CarRuntime()
    for t in CORPUS["tools"] + case.get("extra_tools", []):
        rt.register_tool_schema(t)
    for p in case.get("policies", []):
        rt.register_policy(p["name"], p["rule"], p.get("target"), p.get("key"), p.get("pattern"), p.get("value_json"))
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
    mode = case.get("approver")
    if mode is not None:

        def approver(event_json):
            ev = json.loads(event_json)
            if ev["event"] != "pending":
                return
            if mode == "approve":
                rt.approval_resolve(ev["key"], "allow", "conformance approver")
            elif mode == "deny":
                rt.approval_resolve(ev["key"], "deny", "conformance approver")
            # "timeout": never answers

        rt.on_approval(approver)
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


def test_the_corpus_is_substantial():
    assert len(CASES) >= 40, len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case, tmp_path):
    rt = runtime_for(case, tmp_path)
    result = json.loads(rt.execute_proposal(json.dumps(case["proposal"]), stub))
    events_text = rt.event_query({"kinds": ["AdmissionDecided"]})
    events = json.loads(events_text)["events"]
    got = [(r["action_id"], r["status"], layer_of(events, r["action_id"])) for r in result["results"]]
    want = [(e["id"], e["status"], e["layer"]) for e in case["expected"]]
    assert got == want, result["results"]
    for action_id, what in case.get("compensation", {}).items():
        r = next(r for r in result["results"] if r["action_id"] == action_id)
        assert compensation_of(r) == what, r
    for k, v in case.get("cost", {}).items():
        assert result["cost"][k] == v, result["cost"]
    # Every verdict is recorded, without the parameter values.
    for secret in ["rm -rf victim", "evil.test"]:
        assert secret not in events_text
