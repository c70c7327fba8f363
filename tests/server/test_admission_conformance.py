"""The admission conformance corpus (tests/conformance/admission/cases.json)
through car-server and a real WebSocket client: the same statuses and deciding
layers as the Rust facade, the bindings and `car run`.

Each case runs on a fresh connection (a connection is a session with its own
runtime). The tier is set with `permission.set_tier` (the wire never sets it in
the document); cases with policy files or an approvals ledger get a daemon of
their own, whose `$CAR_HOME` holds them.
"""

import asyncio
import json
import pathlib

import pytest

from client import RpcError, Client, ToolError
from test_server import URL, TOKEN, Daemon, authed, run

CORPUS = json.loads((pathlib.Path(__file__).parents[1] / "conformance" / "admission" / "cases.json").read_text())
CASES = CORPUS["cases"]


async def stub(params):
    if (params.get("parameters") or {}).get("fail") is True:
        raise ToolError("stub failure")
    return {"ok": True}


async def approver_for(case, url, token):
    """A second connection answering the case's asks over the wire
    (`approver`: approve, deny, or timeout: never answers)."""
    how = case.get("approver")
    if how not in ("approve", "deny", "timeout"):
        return None
    a = await authed(url, token)
    await a.call("server.handshake", {"protocol_version": 3})
    await a.call("host.subscribe", {})

    async def answer():
        seen = set()
        while True:
            for n in list(a.notifications):
                p = n["params"]
                if p.get("type") == "approval.requested" and p["approval"]["approval_id"] not in seen:
                    seen.add(p["approval"]["approval_id"])
                    if how != "timeout":
                        await a.call("host.resolve_approval", {"approval_id": p["approval"]["approval_id"],
                                                               "resolution": how, "reason": "corpus"})
            await asyncio.sleep(0.01)

    a.answering = asyncio.create_task(answer())
    return a


async def run_case(case, url=URL, token=TOKEN):
    c = await authed(url, token)
    a = await approver_for(case, url, token)
    try:
        c.handlers["tools.execute"] = stub
        await c.call("tools.register", CORPUS["tools"] + case.get("extra_tools", []))
        for p in case.get("policies", []):
            await c.call("policy.register", p)
        config = dict(case["config"])
        tier = config.pop("tier", None)
        # The daemon's ledger is always keyed; trusting unsigned lines is an
        # operator key (refused over the wire) that it never needs.
        config.pop("ledger_unauthenticated", None)
        if tier is not None:
            await c.call("permission.set_tier", {"tier": tier})
        await c.call("admission.configure", {"config": config})
        try:
            res = await c.call("proposal.submit", {"proposal": case["proposal"]}, timeout=30)
        except RpcError as e:
            # A denied or timed-out approval: -32003, the result in its data.
            assert e.code == -32003, e
            res = e.data["result"]
        events = await c.call("events.query", {"kinds": ["AdmissionDecided"]})
    finally:
        if a is not None:
            a.answering.cancel()
            await a.close()
        await c.close()
    got = []
    for r in res["results"]:
        layer = next(
            (e["data"]["layer"] for e in events["events"]
             if e["action_id"] == r["action_id"] and e["data"].get("stage") != "compensation"),
            "none",
        )
        got.append({"id": r["action_id"], "status": r["status"], "layer": layer})
    return res, got


def check(case, res, got):
    # Every daemon session has the daemon's approvals store: an ask nobody
    # is attached to answer is refused by the `approval` layer, where a
    # runtime without `approvals_dir` refuses it at the layer that asked
    # (docs/compatibility.md).
    errors = {r["action_id"]: r.get("error") or "" for r in res["results"]}
    expected = [
        dict(e, layer="approval")
        if e["status"] == "rejected" and "no approver is attached" in errors.get(e["id"], "") else e
        for e in case["expected"]
    ]
    assert got == expected, f"{case['name']}: {res['results']}"
    for aid, what in (case.get("compensation") or {}).items():
        r = next(r for r in res["results"] if r["action_id"] == aid)
        seen = "compensated" if r.get("compensated") else "refused" if r.get("compensation_error") else "none"
        assert seen == what, f"{case['name']}: {r}"
    for k, v in (case.get("cost") or {}).items():
        assert res["cost"][k] == v, f"{case['name']}: cost {res['cost']}"


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", [c for c in CASES if not c.get("policy_files") and not c.get("ledger")], ids=lambda c: c["name"])
def test_case_on_the_shared_daemon(case):
    if case.get("daemon_skip"):
        pytest.skip(case["daemon_skip"])
    res, got = run(run_case(case))
    check(case, res, got)


@pytest.mark.parametrize("case", [c for c in CASES if c.get("policy_files") or c.get("ledger")], ids=lambda c: c["name"])
def test_case_on_a_daemon_of_its_own(case, tmp_path):
    home = tmp_path / "home"
    if case.get("policy_files"):
        pol = home / "policies"
        pol.mkdir(parents=True)
        for name, text in case["policy_files"].items():
            (pol / name).write_text(text)
    home.mkdir(parents=True, exist_ok=True)

    async def record(url):
        # The daemon's ledger is authenticated: a hand-written line never
        # approves, so the case's records are made through the API, from a
        # connection other than the one that submits.
        reviewer = await authed(url, "case-token")
        for rec in case["ledger"]:
            method = "permission.approve" if rec["decision"] == "approved" else "permission.reject"
            await reviewer.call(method, {"fingerprint": rec["fingerprint"], "required_tier": rec["required_tier"],
                                         "reason": rec["reason"]})
        await reviewer.close()

    if case.get("ledger_hand_written"):
        # The case's lines written into the daemon's ledger by hand, as an
        # agent with write access would: they must not count.
        (home / "tier-approvals.jsonl").write_text("".join(json.dumps(l) + "\n" for l in case["ledger"]))
    with Daemon("--auth-token", "case-token", home=str(home)) as d:
        url = d.url.rstrip("/")
        if case.get("ledger") and not case.get("ledger_hand_written"):
            run(record(url))
        res, got = run(run_case(case, url, "case-token"))
    check(case, res, got)


def test_a_hand_written_ledger_line_does_not_approve(tmp_path):
    case = next(c for c in CASES if c["name"] == "tier escalation with a ledger approval runs")
    home = tmp_path / "home"
    home.mkdir()
    (home / "approvals.jsonl").write_text("".join(json.dumps(l) + "\n" for l in case["ledger"]))
    with Daemon("--auth-token", "case-token", home=str(home)) as d:
        res, _ = run(run_case(case, d.url.rstrip("/"), "case-token"))
    assert res["results"][0]["status"] == "rejected", res


def test_wire_config_cannot_set_operator_keys():
    async def go():
        c = await authed()
        for key, value in [("tier", "full_access"), ("ledger_path", "/tmp/forged.jsonl"), ("approvals_dir", "/tmp"),
                           ("ledger_unauthenticated", True)]:
            r = await c.request("admission.configure", {"config": {key: value}})
            assert r["error"]["code"] == -32602, r
            assert key in r["error"]["message"]
        # A bad document names the key and changes nothing.
        await c.call("admission.configure", {"config": {"deny": [{"tool": "deploy"}]}})
        r = await c.request("admission.configure", {"config": {"dney": []}})
        assert r["error"]["code"] == -32602 and "dney" in r["error"]["message"], r
        assert (await c.call("admission.get"))["deny"] == [{"tool": "deploy"}]
        await c.close()

    run(go())


def test_plan_then_apply_over_the_wire():
    async def go():
        c = await authed()
        c.handlers["tools.execute"] = stub
        await c.call("tools.register", CORPUS["tools"])
        await c.call("admission.configure", {"config": {"deny": [{"tool": "migrate"}], "preset": "open"}})
        p = {"actions": [
            {"id": "l", "type": "tool_call", "tool": "lookup"},
            {"id": "m", "type": "tool_call", "tool": "migrate", "parameters": {"env": "x"}, "failure_behavior": "skip"},
        ]}
        before = await c.call("events.count")
        plan = await c.call("proposal.plan", {"proposal": p})
        assert await c.call("events.count") == before, "planning records nothing"
        items = {i["action_id"]: i for i in plan["items"]}
        assert (items["l"]["verdict"], items["l"]["layer"]) == ("allow", "default")
        assert (items["m"]["verdict"], items["m"]["layer"]) == ("deny", "deny-rule")
        assert plan["counts"] == {"allow": 1, "ask": 0, "deny": 1}
        res = await c.call("proposal.apply", {"plan_id": plan["plan_id"]})
        assert [r["status"] for r in res["results"]] == ["succeeded", "rejected"]
        r = await c.request("proposal.apply", {"plan_id": plan["plan_id"]})
        assert r["error"]["code"] == -32602 and "plan" in r["error"]["message"], r
        await c.close()

    run(go())


def test_the_operators_document_applies_to_every_session_and_agents_cannot_change_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "permissions.toml").write_text('preset = "open"\n[shell]\ndeny = ["touch **"]\n')

    async def go(url):
        agent = await Client.connect(url)
        assert (await agent.call("session.auth", {"token": "agent-secret", "agent_id": "a1"}))["ok"] is True
        agent.handlers["tools.execute"] = stub
        await agent.call("tools.register", CORPUS["tools"])
        r = await agent.request("admission.configure", {"config": {}})
        assert "error" in r, r
        assert (await agent.call("admission.get"))["shell"] == {"deny": ["touch **"]}
        res = await agent.call("proposal.submit", {"proposal": {"actions": [
            {"id": "t", "type": "tool_call", "tool": "shell", "parameters": {"command": "touch x"}}]}})
        assert res["results"][0]["status"] == "rejected"
        await agent.close()

    with Daemon("--auth-token", "op-secret", "--agent-token", "a1=agent-secret", home=str(home)) as d:
        run(go(d.url.rstrip("/")))
