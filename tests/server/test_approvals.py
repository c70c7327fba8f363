"""Issue #19: ask approvals over the wire.

Two connections to one daemon: one submits a proposal whose action the
admission document asks about, the other is subscribed as an approver
(`host.subscribe`), gets `host.event {type: "approval.requested"}` and
decides with `host.resolve_approval`. Deny, timeout, self-approval, the
`always` scope and the server-stamped reviewer, each against the real binary
on a daemon of its own (CAR_SERVER_BIN).
"""

import asyncio
import json
import os
import shutil

import pytest

from client import Client
from test_server import Daemon, proposal, run, tool_call

OP = "operator-token-approvals-0123456789"
AGENT = "agent-token-approvals-0123456789"
ASK_ECHO = {"ask": [{"tool": "echo"}]}


@pytest.fixture(scope="module")
def daemon():
    d = Daemon("--agent-token", f"a1={AGENT}", env={"CAR_AUTH_TOKEN": OP})
    try:
        yield d
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)


async def connect(url, auth=None, admission=None):
    c = await Client.connect(url)
    assert (await c.call("session.auth", auth or {"token": OP}))["ok"] is True
    await c.call("server.handshake", {"protocol_version": 3})
    init = await c.call("session.init", {"client_id": "approvals-test", **({"admission": admission} if admission else {})})
    c.session_id = init["session_id"]
    return c


async def submitter(url, admission=ASK_ECHO, auth=None):
    c = await connect(url, auth=auth, admission=admission)
    await c.call("tools.register", [{"name": "echo"}])
    c.ran = []

    async def execute(params):
        c.ran.append(params["parameters"])
        return "ok"

    c.handlers["tools.execute"] = execute
    return c


async def approver(url):
    c = await connect(url)
    r = await c.call("host.subscribe", {})
    assert r["subscribed"] is True
    return c


async def requested(c, proposal_id, timeout=20, field="proposal_id"):
    """The next approval.requested notification whose approval's `field`
    (default: the proposal id) is `proposal_id`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        for n in c.notifications:
            p = n["params"]
            if n["method"] == "host.event" and p["type"] == "approval.requested" \
                    and p["approval"].get(field) == proposal_id:
                c.notifications.remove(n)
                return n
        await asyncio.sleep(0.02)
    raise AssertionError(f"no approval.requested with {field} {proposal_id}: {c.notifications}")


def echo(aid, **params):
    return tool_call(aid, "echo", parameters=params)


def test_an_approver_sees_the_plan_item_and_its_approval_runs_the_waiting_action(daemon):
    async def go():
        a = await approver(daemon.url)
        s = await submitter(daemon.url)
        pending = asyncio.create_task(
            s.request("proposal.submit", {"proposal": proposal([echo("e1", msg="hi")], "ok-1")}))
        note = await requested(a, "ok-1")
        item = note["params"]["approval"]
        # The plan item, without the protected value.
        assert item["tool"] == "echo" and item["action_id"] == "e1" and item["status"] == "pending"
        assert item["layer"] == "ask-rule" and item["submitted_by"] == s.session_id
        assert item["parameters"] == {"msg": "hi"} and item["kind"] == "resource"
        assert item["approval_id"].startswith("echo:")
        listed = await a.call("host.approvals")
        assert [x["approval_id"] for x in listed["approvals"]] == [item["approval_id"]]
        assert not pending.done(), "the submitter waits while the approval is pending"
        r = await a.call("host.resolve_approval",
                         {"approval_id": item["approval_id"], "resolution": "approve", "scope": "once", "reason": "looks fine"})
        assert r["applied"] is True and r["decision"] == "allow"
        assert r["reviewer"] == f"car-server:operator:{a.session_id}"
        res = (await pending)["result"]
        assert res["results"][0]["status"] == "succeeded", res
        assert s.ran == [{"msg": "hi"}]
        # The history names the reviewer, the scope and the reason.
        h = await a.call("host.approval", {"approval_id": item["approval_id"]})
        events = [row["event"] for row in h["history"]]
        assert events == ["requested", "allowed"], h
        last = h["history"][-1]
        assert (last["reviewer"], last["scope"], last["reason"]) == (r["reviewer"], "once", "looks fine")
        # Decided elsewhere: every approver was told.
        assert (await a.call("host.approvals"))["approvals"] == []
        # Deciding it again changes nothing.
        again = await a.request("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "deny"})
        assert again["error"]["data"]["code"] == "approval_not_pending"
        await s.close()
        await a.close()

    run(go())


def test_a_denial_rejects_with_32003_naming_the_approval(daemon):
    async def go():
        a = await approver(daemon.url)
        s = await submitter(daemon.url)
        pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([echo("d1", msg="no")], "deny-1")}))
        item = (await requested(a, "deny-1"))["params"]["approval"]
        await a.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "deny", "reason": "not now"})
        resp = await pending
        err = resp["error"]
        assert err["code"] == -32003, resp
        assert err["message"].startswith("Approval denied or timed out")
        assert err["data"]["code"] == "approval_denied"
        assert err["data"]["approvals"] == [{"approval_id": item["approval_id"], "action_id": "d1", "status": "denied"}]
        result = err["data"]["result"]["results"][0]
        assert result["status"] == "rejected" and item["approval_id"] in result["error"] and "not now" in result["error"]
        assert s.ran == []
        await s.close()
        await a.close()

    run(go())


def test_an_unanswered_approval_times_out_and_is_refused(daemon):
    async def go():
        a = await approver(daemon.url)
        s = await submitter(daemon.url, admission={**ASK_ECHO, "approval_timeout_ms": 300})
        resp = await s.request("proposal.submit", {"proposal": proposal([echo("t1", msg="late")], "timeout-1")})
        assert resp["error"]["code"] == -32003, resp
        assert resp["error"]["data"]["code"] == "approval_timeout"
        approval_id = resp["error"]["data"]["approvals"][0]["approval_id"]
        h = await a.call("host.approval", {"approval_id": approval_id})
        assert [row["event"] for row in h["history"]] == ["requested", "timed_out"]
        assert h["history"][-1]["by"] == "timeout"
        assert s.ran == []
        await s.close()
        await a.close()

    run(go())


def test_a_connection_cannot_approve_its_own_proposal(daemon):
    async def go():
        s = await submitter(daemon.url)
        await s.call("host.subscribe", {})
        other = await approver(daemon.url)
        pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([echo("s1", msg="me")], "self-1")}))
        item = (await requested(s, "self-1"))["params"]["approval"]
        r = await s.request("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve"})
        assert r["error"]["code"] == -32603 and r["error"]["data"]["code"] == "self_approval", r
        assert r["error"]["message"].startswith("self-approval refused")
        assert not pending.done()
        await other.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve"})
        assert (await pending)["result"]["results"][0]["status"] == "succeeded"
        await other.close()
        await s.close()

    run(go())


def test_self_approval_counts_when_the_daemon_allows_it():
    d = Daemon("--allow-self-approval", env={"CAR_AUTH_TOKEN": OP})
    try:
        async def go():
            s = await submitter(d.url)
            await s.call("host.subscribe", {})
            pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([echo("s1")], "self-ok")}))
            item = (await requested(s, "self-ok"))["params"]["approval"]
            await s.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve"})
            assert (await pending)["result"]["results"][0]["status"] == "succeeded"
            await s.close()

        run(go())
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)


def test_the_reviewer_cannot_be_forged_and_an_agent_cannot_decide(daemon):
    async def go():
        a = await approver(daemon.url)
        s = await submitter(daemon.url)
        pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([echo("f1", msg="x")], "forge-1")}))
        item = (await requested(a, "forge-1"))["params"]["approval"]
        r = await a.request("host.resolve_approval",
                            {"approval_id": item["approval_id"], "resolution": "approve", "reviewer": "alice"})
        assert r["error"]["code"] == -32602 and "stamped by the server" in r["error"]["message"]
        agent = await connect(daemon.url, auth={"token": AGENT, "agent_id": "a1"})
        for method in ["host.resolve_approval", "host.approvals", "host.approval", "host.subscribe"]:
            r = await agent.request(method, {"approval_id": item["approval_id"], "resolution": "approve"})
            assert r["error"]["message"].startswith(f"forbidden: `{method}`"), r
        assert not pending.done()
        r = await a.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve"})
        assert r["reviewer"] == f"car-server:operator:{a.session_id}"
        assert (await pending)["result"]["results"][0]["status"] == "succeeded"
        for c in (agent, s, a):
            await c.close()

    run(go())


def test_always_becomes_a_rule_for_later_proposals_but_never_lifts_a_deny(daemon):
    async def go():
        a = await approver(daemon.url)
        s = await submitter(daemon.url, admission={"ask": [{"tool": "summarize"}]})
        await s.call("tools.register", [{"name": "summarize"}])
        summ = lambda aid, **p: tool_call(aid, "summarize", parameters=p)
        pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([summ("p1", v=1)], "always-1")}))
        item = (await requested(a, "always-1"))["params"]["approval"]
        r = await a.call("host.resolve_approval",
                         {"approval_id": item["approval_id"], "resolution": "approve", "scope": "always", "reason": "trusted"})
        assert r["scope"] == "always"
        assert (await pending)["result"]["results"][0]["status"] == "succeeded"
        rules = os.path.join(daemon.home, "always-rules.jsonl")
        with open(rules) as f:
            rule = json.loads(f.read().splitlines()[-1])
        assert rule["operation_name"] == "summarize" and rule["decision"] == "allow"
        # A later proposal, other input, another connection: no approval asked.
        s2 = await submitter(daemon.url, admission={"ask": [{"tool": "summarize"}]})
        await s2.call("tools.register", [{"name": "summarize"}])
        res = await s2.call("proposal.submit", {"proposal": proposal([summ("p2", v=2)], "always-2")})
        assert res["results"][0]["status"] == "succeeded", res
        assert s2.ran == [{"v": 2}]
        assert not [n for n in a.notifications if n["params"].get("approval", {}).get("proposal_id") == "always-2"]
        # A deny rule still wins over the always-allow.
        s3 = await submitter(daemon.url, admission={"deny": [{"tool": "summarize"}]})
        await s3.call("tools.register", [{"name": "summarize"}])
        res = await s3.call("proposal.submit", {"proposal": proposal([summ("p3", v=3)], "always-3")})
        assert res["results"][0]["status"] == "rejected" and "deny-rule" in res["results"][0]["error"], res
        assert s3.ran == []
        for c in (s3, s2, s, a):
            await c.close()

    run(go())


def test_session_scope_answers_later_calls_of_the_tool_in_that_session_only(daemon):
    async def go():
        a = await approver(daemon.url)
        s = await submitter(daemon.url, admission={"ask": [{"tool": "notify"}]})
        await s.call("tools.register", [{"name": "notify"}])
        call = lambda aid, **p: tool_call(aid, "notify", parameters=p)
        pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([call("n1", to="a")], "sess-1")}))
        item = (await requested(a, "sess-1"))["params"]["approval"]
        await a.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve", "scope": "session"})
        assert (await pending)["result"]["results"][0]["status"] == "succeeded"
        res = await s.call("proposal.submit", {"proposal": proposal([call("n2", to="b")], "sess-2")})
        assert res["results"][0]["status"] == "succeeded", res
        # Another connection's session is not answered: it asks again.
        s2 = await submitter(daemon.url, admission={"ask": [{"tool": "notify"}]})
        await s2.call("tools.register", [{"name": "notify"}])
        pending = asyncio.create_task(s2.request("proposal.submit", {"proposal": proposal([call("n3", to="c")], "sess-3")}))
        item = (await requested(a, "sess-3"))["params"]["approval"]
        await a.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "deny"})
        assert (await pending)["error"]["code"] == -32003
        for c in (s2, s, a):
            await c.close()

    run(go())


def test_with_no_approver_subscribed_an_ask_is_refused_at_once():
    d = Daemon(env={"CAR_AUTH_TOKEN": OP})
    try:
        async def go():
            s = await submitter(d.url, admission={"ask": [{"tool": "lonely"}]})
            await s.call("tools.register", [{"name": "lonely"}])
            res = await s.call("proposal.submit", {"proposal": proposal([tool_call("l1", "lonely")], "alone-1")})
            assert res["results"][0]["status"] == "rejected"
            assert "no approver is attached" in res["results"][0]["error"], res
            # An approver that subscribed and left detaches again.
            a = await approver(d.url)
            await a.call("host.unsubscribe")
            res = await s.call("proposal.submit", {"proposal": proposal([tool_call("l2", "lonely")], "alone-2")})
            assert "no approver is attached" in res["results"][0]["error"], res
            await a.close()
            await s.close()

        run(go())
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)


def test_a_tier_escalation_waits_for_an_approval_recorded_on_the_ledger(daemon):
    """An action above the granted tier (a credential parameter makes it
    full_access) is an approval too: the notification masks the credential,
    and the approval is a ledger record by the stamped reviewer."""
    async def go():
        a = await approver(daemon.url)
        s = await submitter(daemon.url, admission={})
        await s.call("tools.register", [{"name": "deploy"}])
        act = tool_call("d1", "deploy", parameters={"target": "prod-7", "api_token": "s3cret-value"})
        pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([act], "tier-1")}))
        note = await requested(a, "tier-1")
        item = note["params"]["approval"]
        assert item["kind"] == "tier_escalation" and item["layer"] == "tier"
        assert item["required_tier"] == "full_access" and item["approval_id"].startswith("tier:")
        assert item["parameters"]["target"] == "prod-7" and item["parameters"]["api_token"] != "s3cret-value"
        assert "s3cret-value" not in json.dumps(note), note
        r = await a.request("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve", "scope": "always"})
        assert r["error"]["code"] == -32602 and "scope must be `once`" in r["error"]["message"]
        r = await a.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve", "reason": "release"})
        res = (await pending)["result"]
        assert res["results"][0]["status"] == "succeeded", res
        with open(os.path.join(daemon.home, "tier-approvals.jsonl")) as f:
            rec = json.loads(f.read().splitlines()[-1])
        assert rec["reviewer"] == r["reviewer"] == f"car-server:operator:{a.session_id}"
        # Denied: -32003, nothing ran.
        act2 = tool_call("d2", "deploy", parameters={"target": "prod-8", "api_token": "other"})
        pending = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([act2], "tier-2")}))
        item = (await requested(a, "tier-2"))["params"]["approval"]
        await a.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "deny", "reason": "no"})
        err = (await pending)["error"]
        assert err["code"] == -32003 and err["data"]["approvals"][0]["approval_id"] == item["approval_id"]
        assert err["data"]["result"]["results"][0]["status"] == "rejected"
        assert s.ran == [{"target": "prod-7", "api_token": "s3cret-value"}]
        await s.close()
        await a.close()

    run(go())


# --- the MCP endpoint's asks wait on the same store ---------------------------------


def mcp_url(d, timeout=20):
    """The daemon's MCP endpoint, read from its log (printed after `listening`)."""
    import re
    import time
    end = time.time() + timeout
    while time.time() < end:
        m = re.search(r"MCP endpoint on (http://\S+/mcp) ", d.text())
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise AssertionError("no MCP endpoint in the log: " + d.text())


@pytest.mark.parametrize("resolution", ["approve", "deny"])
def test_an_ask_of_the_mcp_endpoint_waits_for_an_approver_on_the_websocket(resolution, caplog):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    home = __import__("tempfile").mkdtemp(prefix="car-home-")
    with open(os.path.join(home, "permissions.toml"), "w") as f:
        f.write('[[ask]]\ntool = "simulate"\n')
    d = Daemon(env={"CAR_AUTH_TOKEN": OP}, home=home)
    try:
        url = mcp_url(d)

        async def go():
            a = await approver(d.url)
            streams = streamable_http_client(url)
            async with streams as transport:
                async with ClientSession(transport[0], transport[1]) as mcp:
                    await mcp.initialize()
                    write = {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 1}}
                    args = {"proposal": proposal([write], "mcp-ask")}
                    call = asyncio.create_task(mcp.call_tool("simulate", args))
                    item = (await requested(a, "simulate", field="tool"))["params"]["approval"]
                    # The request as a WebSocket submission's: its action, input and layer.
                    assert item["status"] == "pending" and item["layer"] == "ask-rule", item
                    assert item["action_id"] == "mcp-call" and item["submitted_by"].startswith("mcp-"), item
                    assert item["parameters"]["proposal"]["id"] == "mcp-ask", item
                    assert not call.done(), "the MCP call waits while the approval is pending"
                    await a.call("host.resolve_approval",
                                 {"approval_id": item["approval_id"], "resolution": resolution, "reason": "test"})
                    r = await asyncio.wait_for(call, 20)
                    text = r.content[0].text
                    if resolution == "approve":
                        assert not r.is_error, text
                        assert json.loads(text) == {"k": 1}, text  # the state the proposal leaves
                    else:
                        assert r.is_error and "approval" in text, text
            await a.close()

        run(go())
        # The session's DELETE at the end is answered as the SDK expects (204, not 202).
        assert not [r for r in caplog.records if "Session termination failed" in r.getMessage()], caplog.text
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(home, ignore_errors=True)
