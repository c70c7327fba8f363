"""Issue #25 (the daemon): an attacker drives an agent connection.

Roles (who may decide), file policies, supervision identities, self-approval,
auth hardening, bounded resources and duplicate keys, each against the real
binary with a real client. Every test starts daemons of its own
(CAR_SERVER_BIN), so the failed-auth limit and the small resource limits
used here touch no other test.
"""

import asyncio
import json
import os
import socket
import subprocess
import time

import pytest
import websockets

from client import Client
from test_server import BIN, Daemon, proposal, run, tool_call

OP = "operator-token-0123456789"
HOST = "host-token-0123456789"
AGENT = "agent-token-a1-0123456789"
AGENT2 = "agent-token-a2-0123456789"

DECIDING = {
    "permission.approve": lambda: {"action": tool_call("d", "deploy", parameters={"t": "x"}), "reason": "r"},
    "permission.reject": lambda: {"action": tool_call("d", "deploy", parameters={"t": "x"}), "reason": "r"},
    "permission.set_tier": lambda: {"tier": "full_access"},
    "supervision.subscribe": lambda: {"filter": {"tools": ["nothing"]}},
    "supervision.unsubscribe": lambda: {},
    "supervision.pending": lambda: {},
    "supervision.decide": lambda: {"intent_id": "intent-x", "decision": {"kind": "allow"}},
    "host.approvals": lambda: {},
    "host.approval": lambda: {"approval_id": "echo:x"},
    "host.resolve_approval": lambda: {"approval_id": "echo:x", "resolution": "approve"},
    "host.unsubscribe": lambda: {},
}


def agents_args(*extra):
    return ["--agent-token", f"a1={AGENT}", "--agent-token", f"a2={AGENT2}", *extra]


@pytest.fixture(scope="module")
def plain():
    """Daemon token (operator) + two agents; no host token."""
    with Daemon(*agents_args(), env={"CAR_AUTH_TOKEN": OP, "CAR_SUPERVISION_TIMEOUT_MS": "8000"}) as d:
        yield d


@pytest.fixture(scope="module")
def simple():
    """Only a daemon token: the single-token setup every existing client uses."""
    with Daemon(env={"CAR_AUTH_TOKEN": OP}) as d:
        yield d


@pytest.fixture(scope="module")
def hosted():
    """Daemon token + host token + one agent: only the host decides."""
    with Daemon("--host-token", HOST, "--agent-token", f"a1={AGENT}", env={"CAR_AUTH_TOKEN": OP}) as d:
        yield d


async def connect(url, role):
    c = await Client.connect(url)
    params = {
        "operator": {"token": OP},
        "agent": {"token": AGENT, "agent_id": "a1"},
        "agent2": {"token": AGENT2, "agent_id": "a2"},
        "host": {"host_token": HOST},
    }[role]
    r = await c.call("session.auth", params)
    assert r["ok"] is True
    return c


async def executing(c, ran):
    async def execute(params):
        ran.append(params["tool"])
        return "ok"

    c.handlers["tools.execute"] = execute


def unique(tag):
    return f"{tag}-{time.time_ns()}"


# --- who may decide -------------------------------------------------------------


def test_auth_replies_name_the_role(plain, hosted):
    async def go():
        c = await Client.connect(plain.url)
        assert await c.call("session.auth", {"token": AGENT, "agent_id": "a1"}) == {
            "ok": True, "auth_enabled": True, "role": "agent", "agent_id": "a1"}
        caps = await c.call("capabilities.list")
        assert caps["caller_role"] == "agent"
        names = {m["method"] for m in caps["methods"]}
        assert "proposal.submit" in names and not names & set(DECIDING)
        # An agent's token is not the daemon token, nor another agent's.
        r = await c.request("session.auth", {"token": AGENT})
        assert r["error"]["message"] == "auth failed: token mismatch"
        c = await Client.connect(plain.url)
        r = await c.request("session.auth", {"token": AGENT, "agent_id": "a2"})
        assert r["error"]["message"] == "auth failed: agent token mismatch"
        await c.close()
        op = await connect(plain.url, "operator")
        caps = await op.call("capabilities.list")
        assert caps["caller_role"] == "operator" and set(DECIDING) <= {m["method"] for m in caps["methods"]}
        await op.close()
        h = await Client.connect(hosted.url)
        assert await h.call("session.auth", {"host_token": HOST}) == {"ok": True, "auth_enabled": True, "role": "host"}
        await h.close()
        # No host token configured: the host path fails.
        c = await Client.connect(plain.url)
        r = await c.request("session.auth", {"host_token": HOST})
        assert "host token" in r["error"]["message"]
        await c.close()

    run(go())


@pytest.mark.parametrize("method", sorted(DECIDING))
@pytest.mark.parametrize("setup", ["agent", "agent-hosted", "operator-hosted"])
def test_every_decision_method_is_refused_to_every_non_deciding_role(plain, hosted, method, setup):
    """Every decision method × every role that may not decide: an agent (with
    or without a host token configured) and an operator when a host token is."""
    role, d = {"agent": ("agent", plain), "agent-hosted": ("agent", hosted),
               "operator-hosted": ("operator", hosted)}[setup]

    async def go():
        c = await connect(d.url, role)
        r = await c.request(method, DECIDING[method]())
        assert r["error"]["code"] == -32603, r
        assert r["error"]["message"].startswith(f"forbidden: `{method}`"), r
        assert r["error"]["data"]["caller_role"] == role
        # Refused, not dispatched: the tier is unchanged, the connection lives.
        assert await c.call("permission.get_tier") == {"granted_tier": "sandbox_edit"}
        await c.close()

    run(go())


def test_the_deciding_role_may_decide(hosted):
    async def go():
        h = await connect(hosted.url, "host")
        rec = await h.call("permission.approve", DECIDING["permission.approve"]())
        assert rec["reviewer"].startswith("car-server:host:sess-")
        assert (await h.call("supervision.subscribe", {"filter": {"tools": ["nothing"]}}))["subscribed"] is True
        assert (await h.call("supervision.pending"))["intents"] == []
        assert await h.call("permission.set_tier", {"tier": "read_only"}) == {"granted_tier": "read_only"}
        await h.close()

    run(go())


def test_an_agent_cannot_approve_its_own_escalation_but_an_operator_can(plain):
    async def go():
        agent = await connect(plain.url, "agent")
        await agent.call("tools.register", [{"name": "deploy"}])
        ran = []
        await executing(agent, ran)
        deploy = tool_call("d", "deploy", parameters={"target": unique("prod")})
        res = await agent.call("proposal.submit", {"proposal": proposal([deploy])})
        assert res["results"][0]["status"] == "rejected" and "full_access" in res["results"][0]["error"]
        # The attack: approve itself, raise its tier, resubmit.
        for method, params in [("permission.approve", {"action": deploy, "reason": "me"}),
                               ("permission.set_tier", {"tier": "full_access"})]:
            r = await agent.request(method, params)
            assert r["error"]["message"].startswith("forbidden:"), r
        res = await agent.call("proposal.submit", {"proposal": proposal([deploy], "p2")})
        assert res["results"][0]["status"] == "rejected" and ran == []
        # A client cannot pick its reviewer.
        op = await connect(plain.url, "operator")
        r = await op.request("permission.approve", {"action": deploy, "reason": "ok", "reviewer": "alice"})
        assert r["error"]["code"] == -32602 and "stamped by the server" in r["error"]["message"]
        rec = await op.call("permission.approve", {"action": deploy, "reason": "release"})
        assert rec["reviewer"].startswith("car-server:operator:sess-")
        res = await agent.call("proposal.submit", {"proposal": proposal([deploy], "p3")})
        assert res["results"][0]["status"] == "succeeded" and ran == ["deploy"]
        await op.close()
        await agent.close()

    run(go())


def test_a_connection_cannot_approve_its_own_proposal_unless_the_daemon_allows_it(simple):
    async def scenario(url, self_counts):
        c = await connect(url, "operator")
        await c.call("tools.register", [{"name": "deploy"}])
        ran = []
        await executing(c, ran)
        deploy = tool_call("d", "deploy", parameters={"target": unique("self")})
        res = await c.call("proposal.submit", {"proposal": proposal([deploy])})
        assert res["results"][0]["status"] == "rejected"
        await c.call("permission.approve", {"action": deploy, "reason": "my own"})
        res = await c.call("proposal.submit", {"proposal": proposal([deploy], "p2")})
        if self_counts:
            assert res["results"][0]["status"] == "succeeded"
        else:
            assert res["results"][0]["status"] == "rejected"
            assert "self-approval is off" in res["results"][0]["error"]
            other = await connect(url, "operator")
            await other.call("permission.approve", {"action": deploy, "reason": "second pair of eyes"})
            await other.close()
            res = await c.call("proposal.submit", {"proposal": proposal([deploy], "p3")})
            assert res["results"][0]["status"] == "succeeded"
        assert ran == ["deploy"]
        await c.close()

    run(scenario(simple.url, False))
    with Daemon("--allow-self-approval", env={"CAR_AUTH_TOKEN": OP}) as d:
        run(scenario(d.url, True))


async def parked(supervisor, submitter, prop, session_id=None):
    params = {"proposal": prop}
    if session_id:
        params["session_id"] = session_id
    task = asyncio.create_task(submitter.call("proposal.submit", params, timeout=30))
    for _ in range(200):
        mine = [n["params"] for n in supervisor.notifications
                if n["method"] == "supervision.intent" and n["params"]["proposal_id"] == prop["id"]]
        if mine:
            return task, mine[0]
        await asyncio.sleep(0.05)
    raise AssertionError("not parked")


def test_supervision_is_decided_only_by_the_supervisor_it_was_sent_to(plain):
    async def go():
        boss = await connect(plain.url, "operator")
        # The filter names the agent by the identity the server assigns.
        await boss.call("supervision.subscribe", {"filter": {"sessions": ["agent:a1"]}})
        bystander = await connect(plain.url, "operator")
        await bystander.call("supervision.subscribe", {"filter": {"tools": ["unrelated"]}})
        agent = await connect(plain.url, "agent")
        await agent.call("tools.register", [{"name": "echo"}])
        ran = []
        await executing(agent, ran)
        # The escape: a fresh policy session, submitted under it.
        sid = (await agent.call("session.policy.open"))["session_id"]
        task, intent = await parked(boss, agent, proposal([tool_call("e", "echo")], unique("p")), sid)
        assert intent["session_id"] == "agent:a1"
        # The agent can neither list, subscribe nor decide.
        for method in ("supervision.pending", "supervision.subscribe", "supervision.decide"):
            params = {"intent_id": intent["id"], "decision": {"kind": "allow"}} if method.endswith("decide") else {}
            r = await agent.request(method, params)
            assert r["error"]["message"].startswith("forbidden:"), (method, r)
        # Another supervisor whose filter did not match: it sees nothing and cannot decide.
        assert (await bystander.call("supervision.pending"))["intents"] == []
        r = await bystander.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert "was not sent to this supervisor" in r["error"]["message"]
        assert not task.done() and ran == []
        r = await boss.request("supervision.decide", {"intent_id": intent["id"], "reviewer": "x",
                                                      "decision": {"kind": "allow"}})
        assert r["error"]["code"] == -32602
        decided = await boss.call("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert decided["reviewer"].startswith("car-server:operator:sess-")
        res = await task
        assert res["results"][0]["status"] == "succeeded" and ran == ["echo"]
        # A second agent is not under the filter.
        agent2 = await connect(plain.url, "agent2")
        await agent2.call("tools.register", [{"name": "echo"}])
        await executing(agent2, ran)
        res = await agent2.call("proposal.submit", {"proposal": proposal([tool_call("e", "echo")], unique("q"))})
        assert res["results"][0]["status"] == "succeeded"
        for c in (agent2, agent, bystander, boss):
            await c.close()

    run(go())


def test_a_supervisor_cannot_allow_its_own_proposal(simple):
    async def go():
        boss = await connect(simple.url, "operator")
        await boss.call("supervision.subscribe", {"filter": {"tools": ["echo"]}})
        await boss.call("tools.register", [{"name": "echo"}])
        ran = []
        await executing(boss, ran)
        task, intent = await parked(boss, boss, proposal([tool_call("e", "echo")], unique("own")))
        r = await boss.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert r["error"]["message"].startswith("self-approval refused"), r
        other = await connect(simple.url, "operator")
        await other.call("supervision.subscribe", {"filter": {"tools": ["echo"]}})
        # Announced before `other` subscribed: it was not sent to it.
        r = await other.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert "not sent" in r["error"]["message"]
        await boss.call("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "deny", "reason": "no"}})
        res = await task
        assert res["results"][0]["error"] == "denied by supervisor: no" and ran == []
        await other.close()
        await boss.close()

    run(go())


def test_file_policies_cannot_be_removed_or_shadowed_over_the_wire():
    with Daemon(*agents_args(), env={"CAR_AUTH_TOKEN": OP}) as d:
        os.makedirs(os.path.join(d.home, "policies"), exist_ok=True)
        with open(os.path.join(d.home, "policies", "10-shell.toml"), "w") as f:
            f.write('deny_tool = ["shell"]\n')

        async def go():
            shell = tool_call("s", "shell", parameters={"command": "echo hi"})
            op = await connect(d.url, "operator")
            await op.call("permission.approve", {"action": shell, "reason": "let the policy decide"})
            for role in ("agent", "operator"):
                c = await connect(d.url, role)
                await c.call("tools.register", [{"name": "shell"}])
                ran = []
                await executing(c, ran)
                names = [p["name"] for p in (await c.call("policy.list"))["policies"]]
                assert "deny_tool:shell" in names
                for method, params in [
                    ("policy.unregister", {"name": "deny_tool:shell"}),
                    ("policy.register", {"name": "deny_tool:shell", "rule": "deny_tool", "target": "nothing"}),
                    ("session.init", {"client_id": "x", "policies": [{"name": "deny_tool:shell", "rule": "deny_tool",
                                                                      "target": "nothing"}]}),
                ]:
                    r = await c.request(method, params)
                    assert r["error"]["code"] == -32603 and "policy directory" in r["error"]["message"], (role, r)
                # Its own policies remain its own to remove.
                await c.call("policy.register", {"name": "mine", "rule": "deny_tool", "target": "x"})
                assert (await c.call("policy.unregister", {"name": "mine"}))["removed"] == 1
                res = await c.call("proposal.submit", {"proposal": proposal([shell])})
                assert res["results"][0]["status"] == "rejected" and "shell" in res["results"][0]["error"]
                assert ran == []
                await c.close()
            await op.close()

        run(go())


# --- auth ---------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["--auth-token", ""], ["--auth-token", "   "], ["--auth-token=\t"],
    ["--host-token", ""], ["--agent-token", "a1="], ["--agent-token", "a1= "],
    ["--host-token", OP], ["--agent-token", f"a1={OP}"],
])
def test_an_empty_or_shared_token_refuses_to_start(args):
    env = {k: v for k, v in os.environ.items() if k != "CAR_AUTH_TOKEN"}
    env["CAR_AUTH_TOKEN"] = OP
    env["CAR_HOME"] = os.path.join("/tmp", f"car-roles-{os.getpid()}")
    p = subprocess.run([BIN, "--port", "0", *args], capture_output=True, text=True, timeout=20, env=env)
    assert p.returncode == 2, p.stderr
    assert "is empty" in p.stderr or "same token" in p.stderr, p.stderr
    assert "listening" not in p.stderr


def test_failed_auth_is_throttled_per_peer_address():
    env = {"CAR_AUTH_TOKEN": OP, "CAR_AUTH_FAILURE_WINDOW_MS": "4000"}
    with Daemon(env=env) as d:
        async def go():
            c = await Client.connect(d.url)
            for i in range(5):  # the default limit
                r = await c.request("session.auth", {"token": f"guess-{i}"})
                assert r["error"]["message"] == "auth failed: token mismatch"
            # Locked out: even the right token is refused, and the connection closes.
            r = await c.request("session.auth", {"token": OP})
            assert "too many failed attempts" in r["error"]["message"], r
            assert r["error"]["data"]["code"] == "auth_throttled"
            await asyncio.wait_for(c.closed.wait(), 5)
            # Per address, not per connection.
            c = await Client.connect(d.url)
            r = await c.request("session.auth", {"token": OP})
            assert "too many failed attempts" in r["error"]["message"]
            await asyncio.sleep(4.1)
            c = await Client.connect(d.url)
            assert (await c.call("session.auth", {"token": OP}))["ok"] is True
            await c.close()

        run(go())


def test_a_failed_reauth_deauthenticates():
    with Daemon(*agents_args(), env={"CAR_AUTH_TOKEN": OP}) as d:
        async def go():
            c = await connect(d.url, "operator")
            assert await c.call("state.keys") == []
            r = await c.request("session.auth", {"token": "wrong"})
            assert r["error"]["message"] == "auth failed: token mismatch"
            r = await c.request("state.keys")
            assert r["error"]["code"] == -32001
            await asyncio.wait_for(c.closed.wait(), 5)
            # A malformed re-auth fails too, and de-authenticates as well.
            c = await connect(d.url, "operator")
            r = await c.request("session.auth", {"token": 5})
            assert r["error"]["code"] == -32602
            assert (await c.request("state.keys"))["error"]["code"] == -32001
            # Re-auth as an agent drops the operator's powers and subscription.
            c = await connect(d.url, "operator")
            await c.call("supervision.subscribe", {})
            assert (await c.call("session.auth", {"token": AGENT, "agent_id": "a1"}))["role"] == "agent"
            r = await c.request("supervision.pending")
            assert r["error"]["message"].startswith("forbidden:")
            await c.close()

        run(go())


# --- bounded resources --------------------------------------------------------------


def raw_ws(url, rcvbuf=None):
    host, port = url[len("ws://"):].rstrip("/").rsplit(":", 1)
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((host, int(port)))
    s.sendall((f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert b" 101 " in head, head
    return s


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_a_peer_that_does_not_read_is_closed_and_memory_stays_bounded():
    with Daemon(env={"CAR_AUTH_TOKEN": OP}) as d:
        before = rss_kb(d.proc.pid)
        s = raw_ws(d.url, rcvbuf=4096)
        s.settimeout(10)
        # One-byte frames (`x`: a parse error each, answered), masked with a zero key.
        frame = b"\x81\x81\x00\x00\x00\x00x"
        chunk = frame * 10_000
        sent, closed = 0, False
        try:
            for _ in range(150):  # up to 1.5 M frames, before auth
                s.sendall(chunk)
                sent += 10_000
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            closed = True
        s.close()
        grown = rss_kb(d.proc.pid) - before
        assert closed, f"sent {sent} frames and the daemon never closed the connection"
        assert grown < 64 * 1024, f"daemon grew by {grown} kB"
        assert "does not read its replies" in d.text()

        async def alive():
            c = await connect(d.url, "operator")
            assert await c.call("state.keys") == []
            await c.close()

        run(alive())


def test_unauthenticated_connections_are_bounded_and_timed_out():
    env = {"CAR_AUTH_TOKEN": OP, "CAR_MAX_UNAUTH_CONNECTIONS": "3", "CAR_AUTH_TIMEOUT_MS": "4000"}
    with Daemon(env=env) as d:
        async def go():
            idle = [await websockets.connect(d.url) for _ in range(3)]
            with pytest.raises(Exception):
                extra = await websockets.connect(d.url, open_timeout=3)
                await extra.recv()
            # Authenticating frees a slot.
            c = Client(idle[0])
            assert (await c.call("session.auth", {"token": OP}))["ok"] is True
            fresh = await Client.connect(d.url)
            assert (await fresh.call("session.auth", {"token": OP}))["ok"] is True
            # The unauthenticated ones are closed after the auth timeout (1008).
            for ws in idle[1:]:
                with pytest.raises(websockets.ConnectionClosed) as e:
                    await asyncio.wait_for(ws.recv(), 10)
                assert e.value.rcvd.code == 1008 and "not authenticated" in e.value.rcvd.reason
            # The authenticated ones stay.
            await asyncio.sleep(0.5)
            assert await c.call("state.keys") == [] and await fresh.call("state.keys") == []
            await c.close()
            await fresh.close()

        run(go())


def test_requests_in_flight_per_connection_are_bounded():
    with Daemon(env={"CAR_AUTH_TOKEN": OP, "CAR_MAX_IN_FLIGHT": "2"}) as d:
        async def go():
            c = await connect(d.url, "operator")
            await c.call("tools.register", [{"name": "echo"}])
            gate = asyncio.Event()

            async def execute(params):
                await gate.wait()
                return "ok"

            c.handlers["tools.execute"] = execute
            slow = [asyncio.create_task(c.call("proposal.submit", {"proposal": proposal([tool_call("e")], f"s{i}")}))
                    for i in range(2)]
            while len(c.server_requests) < 2:
                await asyncio.sleep(0.02)
            r = await c.request("state.keys")
            assert r["error"]["data"]["code"] == "busy" and "in flight" in r["error"]["message"]
            gate.set()
            for t in slow:
                assert (await t)["results"][0]["status"] == "succeeded"
            assert await c.call("state.keys") == []
            await c.close()

        run(go())


# --- duplicate keys ---------------------------------------------------------------------


DUPLICATES = [
    '{"jsonrpc":"2.0","id":7,"method":"proposal.submit","params":{"proposal":{"id":"p","actions":[{"id":"a","type":"tool_call","tool":"calculate","tool":"shell"}]}}}',
    '{"jsonrpc":"2.0","id":7,"method":"proposal.submit","params":{"proposal":{"id":"p","actions":[{"id":"a","type":"tool_call","tool":"calculate","parameters":{"x":1,"x":2}}]}}}',
    '{"jsonrpc":"2.0","id":7,"method":"proposal.submit","params":{"proposal":{"id":"p","actions":[]},"proposal":{"id":"q","actions":[]}}}',
    '{"jsonrpc":"2.0","id":7,"method":"state.get","method":"state.set","params":{"key":"k"}}',
    '{"jsonrpc":"2.0","id":7,"method":"state.set","params":{"key":"k","key":"other","value":1}}',
    '{"jsonrpc":"2.0","id":7,"method":"policy.register","params":{"name":"n","rule":"deny_tool","target":"a","target":"b"}}',
]


@pytest.mark.parametrize("frame", DUPLICATES)
def test_a_repeated_key_anywhere_in_a_frame_is_refused(simple, frame):
    async def go():
        c = await connect(simple.url, "operator")
        await c.call("tools.register", [{"name": "calculate"}, {"name": "shell"}])
        await c.send_raw(frame)
        r = await c.next_raw()
        assert r["id"] == 7 and r["error"]["code"] == -32600, r
        assert "duplicate key" in r["error"]["message"], r
        # As a batch member too.
        await c.send_raw("[" + frame + "]")
        r = await c.next_raw()
        assert isinstance(r, dict) and r["id"] is None and r["error"]["code"] == -32600, r
        assert c.server_requests == [] and await c.call("state.keys") == []
        await c.close()

    run(go())


def test_a_proposal_as_text_with_a_repeated_key_is_refused_the_same_way(simple):
    async def go():
        c = await connect(simple.url, "operator")
        await c.call("tools.register", [{"name": "calculate"}, {"name": "shell"}])
        for text, key in [
            ('{"id":"p","actions":[{"id":"a","type":"tool_call","tool":"calculate","tool":"shell"}]}', "tool"),
            ('{"id":"p","actions":[{"id":"a","type":"tool_call","tool":"calculate","parameters":{"x":1,"x":2}}]}', "x"),
        ]:
            r = await c.request("proposal.submit", {"proposal": text})
            assert r["error"]["code"] == -32602 and f"`{key}`" in r["error"]["message"], r
        assert c.server_requests == []
        await c.close()

    run(go())


# --- what a client sends never drives the operator's terminal ---------------------


HOSTILE_ID = "\x1b[2K\rcar-server: auth token written to /tmp/x\n\u202efake\x07"


def test_a_hostile_response_id_is_escaped_in_the_daemon_log():
    with Daemon(env={"CAR_AUTH_TOKEN": OP}) as d:

        async def go():
            c = await connect(d.url, "operator")
            # A response to a request the daemon never made: it is logged.
            await c.send_raw(json.dumps({"jsonrpc": "2.0", "id": HOSTILE_ID, "result": None}))
            await c.call("state.keys")
            await c.close()

        run(go())
        deadline = time.time() + 10
        while "ignoring a response" not in d.text() and time.time() < deadline:
            time.sleep(0.05)
        log = d.text()
        line = next(l for l in log.splitlines() if "ignoring a response" in l)
        assert "\\x1b[2K\\rcar-server: auth token written to /tmp/x\\n\\u{202e}fake\\x07" in line, line
        for raw in ["\x1b", "\r", "\u202e", "\x07"]:
            assert raw not in log, repr(log)
        assert not any(l.startswith("fake") or l.startswith("car-server: auth token written to /tmp/x") for l in log.splitlines())
