"""The admission conformance corpus (tests/conformance/admission/cases.json)
through car-server and a real WebSocket client: the same statuses and deciding
layers as the Rust facade, the bindings and `car run`.

Each case runs on a fresh connection (a connection is a session with its own
runtime). The tier is set with `permission.set_tier` (the wire never sets it in
the document); cases with policy files or an approvals ledger get a daemon of
their own, whose `$CAR_HOME` holds them.
"""

import json
import pathlib

import pytest

from client import ToolError
from test_server import URL, TOKEN, Daemon, authed, run

CORPUS = json.loads((pathlib.Path(__file__).parents[1] / "conformance" / "admission" / "cases.json").read_text())
CASES = CORPUS["cases"]


async def stub(params):
    if (params.get("parameters") or {}).get("fail") is True:
        raise ToolError("stub failure")
    return {"ok": True}


async def run_case(case, url=URL, token=TOKEN):
    c = await authed(url, token)
    try:
        c.handlers["tools.execute"] = stub
        await c.call("tools.register", CORPUS["tools"] + case.get("extra_tools", []))
        for p in case.get("policies", []):
            await c.call("policy.register", p)
        config = dict(case["config"])
        tier = config.pop("tier", None)
        if tier is not None:
            await c.call("permission.set_tier", {"tier": tier})
        await c.call("admission.configure", {"config": config})
        res = await c.call("proposal.submit", {"proposal": case["proposal"]}, timeout=30)
        events = await c.call("events.query", {"kinds": ["AdmissionDecided"]})
    finally:
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
    assert got == case["expected"], f"{case['name']}: {res['results']}"
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
    if case.get("ledger"):
        home.mkdir(parents=True, exist_ok=True)
        (home / "approvals.jsonl").write_text("".join(json.dumps(l) + "\n" for l in case["ledger"]))
    with Daemon("--auth-token", "case-token", home=str(home)) as d:
        res, got = run(run_case(case, d.url.rstrip("/"), "case-token"))
    check(case, res, got)


def test_wire_config_cannot_set_operator_keys():
    async def go():
        c = await authed()
        for key, value in [("tier", "full_access"), ("ledger_path", "/tmp/forged.jsonl"), ("approvals_dir", "/tmp")]:
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
