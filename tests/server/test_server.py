"""The car-server daemon driven by a real WebSocket client (Python `websockets`).

Run by tests/server/run.sh, which builds the binary, starts a daemon and sets
CAR_SERVER_URL, CAR_SERVER_TOKEN and CAR_SERVER_BIN. Tests that need their own
daemon (auth off, token files, policies, liveness) start one from CAR_SERVER_BIN.
"""

import asyncio
import hashlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import tempfile
import time

import pytest
import websockets

from client import Client, RpcError, ToolError

URL = os.environ["CAR_SERVER_URL"]
TOKEN = os.environ["CAR_SERVER_TOKEN"]
BIN = os.environ["CAR_SERVER_BIN"]
MAX_FRAME = int(os.environ.get("CAR_SERVER_MAX_FRAME", "65536"))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def authed(url=URL, token=TOKEN):
    c = await Client.connect(url)
    assert await c.call("session.auth", {"token": token}) == {"ok": True, "auth_enabled": True}
    return c


class Daemon:
    """A daemon of its own on a free port (`--port 0`), read from its log."""

    def __init__(self, *args, env=None, home=None, cwd=None):
        self.home = home or tempfile.mkdtemp(prefix="car-home-")
        e = dict(os.environ)
        e.pop("CAR_AUTH_TOKEN", None)
        e["CAR_HOME"] = self.home
        e.update(env or {})
        self.log = tempfile.NamedTemporaryFile(prefix="car-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([BIN, "--port", "0", *args], env=e, stderr=self.log, stdout=subprocess.DEVNULL,
                                     cwd=cwd)
        deadline = time.time() + 20
        while time.time() < deadline:
            m = re.search(r"listening on (ws://\S+:\d+/) ", self.text())
            if m:
                self.url = m.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited: " + self.text())
            time.sleep(0.05)
        raise RuntimeError("daemon did not start: " + self.text())

    def text(self):
        with open(self.log.name) as f:
            return f.read()

    def token_file(self):
        return os.path.join(self.home, "ai.parslee.car", "auth-token")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def proposal(actions, pid="p1"):
    return {"id": pid, "source": "test", "actions": actions}


def tool_call(aid, tool="echo", **kw):
    a = {"id": aid, "type": "tool_call", "tool": tool, "parameters": kw.pop("parameters", {})}
    a.update(kw)
    return a


# --- authentication ------------------------------------------------------------


def test_auth_right_token_then_methods_work():
    async def go():
        c = await authed()
        assert await c.call("state.set", {"key": "k", "value": 1}) == "ok"
        assert await c.call("state.get", {"key": "k"}) == 1
        await c.close()

    run(go())


def test_auth_wrong_token_stays_unauthenticated_then_closes():
    async def go():
        c = await Client.connect(URL)
        r = await c.request("session.auth", {"token": "x" * 43})
        assert r["error"]["code"] == -32603
        assert r["error"]["message"] == "auth failed: token mismatch"
        # Still open and still unauthenticated: the next non-auth call closes.
        r = await c.request("tools.list")
        assert r["error"]["code"] == -32001
        assert r["error"]["message"].startswith("auth required")
        await asyncio.wait_for(c.closed.wait(), 5)

    run(go())


def test_auth_missing_closes_and_a_wrong_then_right_token_succeeds():
    async def go():
        c = await Client.connect(URL)
        r = await c.request("state.keys")
        assert r["error"]["code"] == -32001
        await asyncio.wait_for(c.closed.wait(), 5)
        c = await Client.connect(URL)
        r = await c.request("session.auth", {})
        assert r["error"] == {"code": -32602, "message": "invalid params: token is required"}
        # The daemon token is not an agent's token.
        r = await c.request("session.auth", {"token": TOKEN, "agent_id": "a1"})
        assert r["error"]["code"] == -32603 and r["error"]["message"] == "auth failed: agent token mismatch"
        r = await c.request("session.auth", {"token": TOKEN[:-1]})
        assert r["error"]["message"] == "auth failed: token mismatch"
        assert (await c.call("session.auth", {"token": TOKEN}))["ok"] is True
        assert await c.call("state.keys") == []
        await c.close()

    run(go())


def test_auth_disabled_accepts_any_token_and_needs_none():
    with Daemon("--no-auth") as d:
        async def go():
            c = await Client.connect(d.url)
            assert await c.call("state.keys") == []
            assert await c.call("session.auth", {"token": "anything"}) == {"ok": True, "auth_enabled": False}
            await c.close()

        run(go())
        assert not os.path.exists(d.token_file())
    with Daemon(env={"CAR_NO_AUTH": "1"}) as d:
        async def go2():
            c = await Client.connect(d.url)
            assert await c.call("events.count") == 0
            await c.close()

        run(go2())


def test_token_file_mode_second_daemon_and_removal_on_shutdown():
    with Daemon() as first:
        path = first.token_file()
        token = open(path).read()
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

        async def go(url, tok):
            c = await authed(url, tok)
            await c.close()

        run(go(first.url, token))
        # A second daemon of the same state root, another port: not primary,
        # so the first one's token file is untouched.
        with Daemon(env={"CAR_AUTH_TOKEN": "second-token"}, home=first.home) as second:
            assert open(path).read() == token
            assert "token stays in memory" in second.text()
            run(go(second.url, "second-token"))
            run(go(first.url, token))
            assert second.stop() == 0
            assert open(path).read() == token
        assert first.stop(signal.SIGINT) == 0
        assert not os.path.exists(path)


def test_port_taken_is_a_clear_error():
    port = URL.rsplit(":", 1)[1].strip("/")
    p = subprocess.run([BIN, "--port", port, "--no-auth"], capture_output=True, text=True, timeout=20)
    assert p.returncode != 0
    assert "already in use" in p.stderr


# --- handshake -----------------------------------------------------------------


def test_handshake_versions_and_capabilities():
    async def go():
        c = await authed()
        for bad in [{}, {"protocol_version": "3"}, {"protocol_version": 2}, {"protocol_version": None}]:
            r = await c.request("server.handshake", bad)
            assert r["error"]["code"] == -32006, bad
            assert r["error"]["message"].startswith("protocol version mismatch:")
        r = await c.request("server.handshake", {"protocol_version": 3, "required_capabilities": ["teleport.v1"]})
        assert r["error"]["code"] == -32008
        assert r["error"]["message"].startswith("protocol capability mismatch:")
        assert "teleport.v1" in r["error"]["message"]
        r = await c.request("server.handshake", {"protocol_version": 3, "optional_capabilities": [""]})
        assert r["error"]["code"] == -32008
        # The auth.* / host.subscribe gate before negotiation.
        r = await c.request("host.subscribe", {})
        assert r["error"]["code"] == -32005
        assert r["error"]["message"].startswith("protocol handshake required:")
        params = {
            "protocol_version": 3,
            "client_version": "v" * 100,
            "required_capabilities": ["models.catalog-identity.v1", "infer.model-identity.v1", "infer.model-identity.v1"],
            "optional_capabilities": ["infer.cancel.v1", "models.catalog-identity.v1"],
        }
        first = await c.call("server.handshake", params)
        assert first["protocol_version"] == 3 and first["client_protocol_version"] == 3
        assert first["client_version"] == "v" * 64
        assert first["negotiated_capabilities"] == ["infer.model-identity.v1", "models.catalog-identity.v1"]
        assert isinstance(first["server_version"], str)
        assert await c.call("server.handshake", params) == first
        plain = await c.call("server.handshake", {"protocol_version": 3})
        assert plain["client_version"] == "unknown" and plain["negotiated_capabilities"] == []
        # After negotiation the gate opens (host.subscribe: the approvers' feed).
        r = await c.request("host.subscribe", {})
        assert r["result"]["subscribed"] is True, r
        await c.close()

    run(go())


def test_capabilities_list_and_schema_digest():
    async def go():
        c = await authed()
        caps = await c.call("capabilities.list", {})
        names = [m["method"] for m in caps["methods"]]
        assert names == sorted(names) and caps["count"] == len(names)
        assert caps["caller_role"] == "operator"
        assert {"proposal.submit", "session.auth", "tools.register", "verify"} <= set(names)
        s = await c.call("server.schema")
        assert s["digest_algorithm"] == "sha256" and s["car_version"]
        canonical = json.dumps(s["schema"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert hashlib.sha256(canonical.encode()).hexdigest() == s["digest"]
        assert (await c.call("server.schema"))["digest"] == s["digest"]
        await c.close()

    run(go())


# --- malformed frames ----------------------------------------------------------


def test_malformed_frames_are_answered_and_the_connection_survives():
    async def go():
        c = await authed()

        async def expect(raw, code, rid=None, contains=""):
            await c.send_raw(raw)
            r = await c.next_raw()
            assert r["jsonrpc"] == "2.0" and r["id"] == rid, (raw, r)
            assert r["error"]["code"] == code, (raw, r)
            assert contains in r["error"]["message"], (raw, r)
            # Still usable after every one.
            assert await c.call("events.count") >= 0

        await expect("{not json", -32700, contains="parse error")
        await expect("", -32700)
        await expect("42", -32600, contains="JSON object")
        await expect("[]", -32600, contains="empty batch")
        await expect('{"id": 5, "method": "state.keys"}', -32600, 5, "`jsonrpc` is required")
        await expect('{"jsonrpc": "1.0", "id": 6, "method": "state.keys"}', -32600, 6)
        await expect('{"jsonrpc": "2.0", "id": {"x": 1}, "method": "state.keys"}', -32600, None, "`id`")
        await expect('{"jsonrpc": "2.0", "id": 7, "method": 12}', -32600, 7, "`method` must be a string")
        await expect('{"jsonrpc": "2.0", "id": 8, "method": "state.keys", "params": 3}', -32600, 8, "`params`")
        await expect('{"jsonrpc": "2.0", "id": 9}', -32600, 9, "`method` is required")
        await expect(b"\x01\x02binary", -32600, None, "binary frames")
        await expect(json.dumps({"jsonrpc": "2.0", "id": 10, "method": "state.set",
                                 "params": {"key": "big", "value": "x" * (MAX_FRAME + 10)}}), -32600, None, "cap")
        await expect('{"jsonrpc": "2.0", "id": 11, "method": "no.such"}', -32601, 11)
        r = await c.request("no.such.method", {})
        assert r["error"] == {"code": -32601, "message": "unknown method: no.such.method"}
        r = await c.request("state.get", {})
        assert r["error"]["code"] == -32602
        assert r["error"]["message"] == "invalid params: key is required"
        r = await c.request("state.get", {"key": 5})
        assert r["error"]["message"] == "invalid params: key must be a string"
        r = await c.request("proposal.submit", {"proposal": {"actions": [{"id": "a", "type": "warp"}]}})
        assert r["error"]["code"] == -32602 and r["error"]["message"].startswith("invalid params: proposal")
        # Notifications: unknown ones are ignored, known ones run unanswered.
        await c.send_raw('{"jsonrpc": "2.0", "method": "no.such.notification"}')
        await c.send_raw('{"jsonrpc": "2.0", "method": "state.set", "params": {"key": "n", "value": 2}}')
        # A response to nothing is ignored.
        await c.send_raw('{"jsonrpc": "2.0", "id": "cb-none", "result": 1}')
        await asyncio.sleep(0.2)
        assert c.raw.empty()
        assert await c.call("state.get", {"key": "n"}) == 2
        # A batch: answered as one array, notifications left out.
        await c.send_raw(json.dumps([
            {"jsonrpc": "2.0", "id": "b1", "method": "state.get", "params": {"key": "n"}},
            {"jsonrpc": "2.0", "method": "state.set", "params": {"key": "m", "value": 3}},
            {"jsonrpc": "2.0", "id": "b2", "method": "nope"},
            7,
        ]))
        batch = await c.next_raw()
        assert isinstance(batch, list) and len(batch) == 3
        by_id = {r["id"]: r for r in batch}
        assert by_id["b1"]["result"] == 2
        assert by_id["b2"]["error"]["code"] == -32601
        assert by_id[None]["error"]["code"] == -32600
        await c.close()

    run(go())


def test_frame_beyond_the_hard_cap_ends_only_that_connection():
    async def go():
        other = await authed()
        c = await authed()
        try:
            await c.send_raw("x" * (4 * 1024 * 1024 + 1))
        except websockets.ConnectionClosed:
            pass
        await asyncio.wait_for(c.closed.wait(), 10)
        assert c.ws.close_code == 1009
        assert await other.call("events.count") >= 0
        await other.close()

    run(go())


def test_garbage_does_not_harm_the_daemon():
    async def go():
        other = await authed()
        # Raw TCP garbage instead of a WebSocket upgrade.
        host, port = URL[len("ws://"):].strip("/").split(":")
        s = socket.create_connection((host, int(port)))
        s.sendall(b"GARBAGE\r\n\r\n")
        s.settimeout(5)
        try:
            s.recv(100)
        except OSError:
            pass
        s.close()
        assert await other.call("events.count") >= 0
        await other.close()

    run(go())


# --- sessions and core namespaces ----------------------------------------------


def test_session_init_tools_policies_state_events_permissions():
    async def go():
        c = await authed()
        r = await c.request("session.init", {"tools": [{"name": "x"}]})
        assert r["error"]["message"] == "invalid params: client_id is required"
        assert (await c.call("tools.list"))["count"] == 0, "nothing registered without client_id"
        init = await c.call("session.init", {
            "client_id": "pytest",
            "tools": [{"name": "echo", "description": "echoes"}],
            "policies": [{"name": "no-rm", "rule": "deny_tool", "target": "rm"}],
        })
        assert init["tools_registered"] == 1 and init["policies_registered"] == 1
        assert init["session_id"]
        assert await c.call("tools.register", [{"name": "a"}, {"name": "b", "parameters": {"type": "object"}}]) == 2
        tools = await c.call("tools.list")
        assert [t["name"] for t in tools["tools"]] == ["a", "b", "echo"] and tools["count"] == 3
        assert await c.call("tools.list") == tools
        assert await c.call("tools.unregister", {"name": "a"}) == {"unregistered": "a", "removed": 1}
        assert await c.call("tools.unregister", {"name": "a"}) == {"unregistered": "a", "removed": 0}
        r = await c.request("tools.register", [{"description": "no name"}])
        assert r["error"]["code"] == -32602 and "tools[0].name" in r["error"]["message"]
        assert await c.call("tools.poll", {"handle": "nope"}) is None
        assert await c.call("tools.cancel", {"handle": "nope"}) == {"cancelled": False}

        assert await c.call("policy.register", {"name": "deny-b", "rule": "deny_tool", "target": "b"}) == \
            {"registered": "deny-b", "scope": "global"}
        pols = await c.call("policy.list")
        assert [p["name"] for p in pols["policies"]] == ["no-rm", "deny-b"] and pols["scope"] == "global"
        r = await c.request("policy.register", {"name": "z", "rule": "nonsense"})
        assert r["error"]["code"] == -32602 and "rule" in r["error"]["message"]
        sess = (await c.call("session.policy.open", {}))["session_id"]
        assert (await c.call("policy.register", {"name": "s", "rule": "deny_tool", "target": "echo",
                                                  "session_id": sess}))["scope"] == {"session_id": sess}
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("a1", "b")]), "session_id": sess})
        assert res["results"][0]["status"] == "rejected" and "deny-b" in res["results"][0]["error"]
        un = await c.call("policy.unregister", {"name": "deny-b"})
        assert un == {"unregistered": "deny-b", "removed": 1, "scope": "global"}
        assert await c.call("session.policy.close", {"session_id": sess}) == {"closed": True}

        assert await c.call("state.set", {"key": "k", "value": {"a": 1}, "tenant_id": "acme"}) == "ok"
        assert await c.call("state.get", {"key": "k", "tenant_id": "acme"}) == {"a": 1}
        assert await c.call("state.get", {"key": "k"}) is None
        assert await c.call("state.exists", {"key": "k", "tenant_id": "acme"}) is True
        assert await c.call("state.keys", {"tenant_id": "acme"}) == ["k"]
        assert await c.call("state.keys") == []
        assert await c.call("state.snapshot", {"tenant_id": "acme"}) == {"k": {"a": 1}}

        n = await c.call("events.count")
        assert n > 0
        q = await c.call("events.query", {"limit": 2})
        assert q["count"] == 2 and len(q["events"]) == 2
        assert isinstance(await c.call("events.stats"), dict)
        assert await c.call("events.chain.enable") == {"ok": True}
        assert "verified" in await c.call("events.chain.verify")
        assert "policy" in await c.call("events.retention", {})
        cleared = await c.call("events.clear")
        assert cleared["removed"] >= n
        assert await c.call("events.count") == 0

        assert await c.call("permission.get_tier", {}) == {"granted_tier": "sandbox_edit"}
        assert await c.call("permission.set_tier", {"tier": "read_only"}) == {"granted_tier": "read_only"}
        r = await c.request("permission.set_tier", {"tier": "godmode"})
        assert r["error"]["code"] == -32602
        p = proposal([tool_call("w", "write_file", parameters={"path": "/tmp/x"})])
        cl = await c.call("permission.classify", {"proposal": p})
        assert cl["classifications"][0]["action_id"] == "w"
        ev = await c.call("permission.evaluate", {"proposal": p})
        assert ev["decisions"][0]["granted"] == "read_only"
        v = await c.call("verify", {"proposal": proposal([tool_call("v1", "echo")])})
        assert v["valid"] is True
        v = await c.call("verify", {"proposal": proposal([tool_call("v1", "unknown_tool")])})
        assert v["valid"] is False
        mc_p = proposal([tool_call("m1", "echo", expected_effects={"x": 1}),
                         tool_call("m2", "flaky", state_dependencies=["x"], expected_effects={"y": 1})])
        mc = await c.call("verify.monte_carlo", {"proposal": mc_p, "tool_success_rates": {"flaky": 0.0},
                                                 "config": {"trials": 50, "seed": 9}})
        assert mc["trials"] == 50 and mc["seed"] == 9
        assert mc["action_outcomes"][1]["p_effects_landed"] == 0.0
        rates = {r["tool"]: r["source"] for r in mc["success_rates"]}
        assert rates["flaky"] == "given" and rates["echo"] in ("event_log", "default")
        again = await c.call("verify.monte_carlo", {"proposal": mc_p, "tool_success_rates": {"flaky": 0.0},
                                                    "config": {"trials": 50, "seed": 9}})
        assert again == mc
        r = await c.request("verify.monte_carlo", {"proposal": mc_p, "config": {"trials": 0}})
        assert r["error"]["code"] == -32602 and "config.trials" in r["error"]["message"]
        await c.close()

    run(go())


def test_sessions_are_per_connection():
    async def go():
        a, b = await authed(), await authed()
        await a.call("state.set", {"key": "only-a", "value": 1})
        await a.call("tools.register", [{"name": "t"}])
        assert await b.call("state.get", {"key": "only-a"}) is None
        assert (await b.call("tools.list"))["count"] == 0
        await a.close()
        await b.close()

    run(go())


# --- tool callbacks -------------------------------------------------------------


async def echo_client():
    c = await authed()
    await c.call("tools.register", [{"name": "echo"}, {"name": "slow"}, {"name": "flaky"}, {"name": "fatal"}])
    return c


def test_proposal_tools_run_in_the_client():
    async def go():
        c = await echo_client()
        seen = []

        async def execute(params):
            seen.append(params)
            return {"echoed": params["parameters"]}

        c.handlers["tools.execute"] = execute
        p = proposal([
            tool_call("a1", parameters={"x": 1}, timeout_ms=5000),
            tool_call("a2", parameters={"y": 2}, depends_on=["a1"]),
        ])
        res = await c.call("proposal.submit", {"proposal": p})
        assert [r["status"] for r in res["results"]] == ["succeeded", "succeeded"]
        assert res["results"][0]["output"] == {"echoed": {"x": 1}}
        assert res["results"][1]["output"] == {"echoed": {"y": 2}}
        first = seen[0]
        assert set(first) >= {"action_id", "tool", "parameters", "timeout_ms", "attempt", "request_id", "session_id"}
        assert first["action_id"] == "a1" and first["tool"] == "echo" and first["attempt"] == 1
        assert first["timeout_ms"] == 5000 and seen[1]["timeout_ms"] is None
        assert first["session_id"]
        ids = [m["id"] for m in c.server_requests]
        assert ids == [s["request_id"] for s in seen] and len(set(ids)) == 2
        await c.close()

    run(go())


def test_concurrent_requests_on_one_connection():
    async def go():
        c = await echo_client()
        release = asyncio.Event()

        async def execute(params):
            await release.wait()
            return "done"

        c.handlers["tools.execute"] = execute
        submit = asyncio.create_task(c.call("proposal.submit", {"proposal": proposal([tool_call("a")])}))
        await asyncio.sleep(0.2)
        # Answered while the proposal is parked on its callback.
        assert await c.call("state.set", {"key": "k", "value": 1}) == "ok"
        assert not submit.done()
        release.set()
        res = await submit
        assert res["results"][0]["status"] == "succeeded"
        await c.close()

    run(go())


def test_retries_carry_attempt():
    async def go():
        c = await echo_client()
        attempts = []

        async def execute(params):
            attempts.append(params["attempt"])
            if params["attempt"] < 3:
                raise ToolError(f"flaky failure {params['attempt']}")
            return "ok"

        c.handlers["tools.execute"] = execute
        p = proposal([tool_call("r", "flaky", failure_behavior="retry", max_retries=3)])
        res = await c.call("proposal.submit", {"proposal": p})
        assert attempts == [1, 2, 3]
        assert res["results"][0]["status"] == "succeeded"
        assert res["cost"]["retries"] == 2
        # The ordinary error message reaches the result when retries run out.
        attempts.clear()
        p = proposal([tool_call("r2", "flaky", failure_behavior="retry", max_retries=1)], "p2")
        res = await c.call("proposal.submit", {"proposal": p})
        assert attempts == [1, 2]
        assert res["results"][0]["status"] == "failed" and "flaky failure 2" in res["results"][0]["error"]
        await c.close()

    run(go())


def test_timeout_sends_tools_cancel():
    async def go():
        c = await echo_client()

        async def execute(params):
            await asyncio.sleep(30)

        c.handlers["tools.execute"] = execute
        p = proposal([tool_call("t1", "slow", timeout_ms=300)])
        res = await c.call("proposal.submit", {"proposal": p})
        assert res["results"][0]["status"] == "failed"
        await asyncio.sleep(0.2)
        cancels = [n for n in c.notifications if n["method"] == "tools.cancel"]
        assert len(cancels) == 1, c.notifications
        cp = cancels[0]["params"]
        assert cp["request_id"] == c.server_requests[0]["id"]
        assert cp["action_id"] == "t1"
        assert "timed out" in cp["reason"] and "slow" in cp["reason"]
        assert "id" not in cancels[0]
        # The late answer to the abandoned call is ignored; the session goes on.
        await c.send_raw(json.dumps({"jsonrpc": "2.0", "id": cp["request_id"], "result": "late"}))
        assert await c.call("events.count") > 0
        await c.close()

    run(go())


def test_daemon_own_wait_sends_tools_cancel():
    """An action with no timeout_ms waits CAR_TOOL_TIMEOUT (2 s in run.sh)."""
    async def go():
        c = await echo_client()

        async def execute(params):
            await asyncio.sleep(30)

        c.handlers["tools.execute"] = execute
        t0 = time.time()
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("w1", "slow")])})
        assert 1.5 < time.time() - t0 < 15
        assert res["results"][0]["status"] == "failed"
        assert "callback timed out (2s)" in res["results"][0]["error"]
        await asyncio.sleep(0.2)
        cancels = [n["params"] for n in c.notifications if n["method"] == "tools.cancel"]
        assert cancels and cancels[0]["reason"] == "tool 'slow' callback timed out (2s)"
        await c.close()

    run(go())


def test_terminal_error_halts_the_session_until_clear_halt():
    async def go():
        c = await echo_client()
        calls = []

        async def execute(params):
            calls.append(params["tool"])
            if params["tool"] == "fatal":
                raise ToolError("receipt journal is unavailable", terminal=True)
            return "ok"

        c.handlers["tools.execute"] = execute
        await c.call("state.set", {"key": "before", "value": 0})
        p = proposal([
            tool_call("ok1", "echo", state_writes=["x"]),
            tool_call("f", "fatal", failure_behavior="retry", max_retries=3, depends_on=["ok1"]),
        ])
        res = await c.call("proposal.submit", {"proposal": p})
        f = res["results"][1]
        assert f["status"] == "failed" and f["terminal"] is True
        assert "receipt journal is unavailable" in f["error"]
        assert calls == ["echo", "fatal"], "a terminal failure is not retried"
        # Halted: later proposals are rejected without dispatching.
        calls.clear()
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("a"), tool_call("b")], "p2")})
        assert [r["status"] for r in res["results"]] == ["rejected", "rejected"]
        assert "halted" in res["results"][0]["error"]
        assert calls == []
        # Other sessions are unaffected.
        other = await echo_client()
        other.handlers["tools.execute"] = execute
        assert (await other.call("proposal.submit", {"proposal": proposal([tool_call("a")])}))["results"][0]["status"] == "succeeded"
        await other.close()
        calls.clear()
        assert await c.call("session.clear_halt", {}) == {"cleared": True, "halted": False}
        assert await c.call("session.clear_halt", {}) == {"cleared": False, "halted": False}
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("a")], "p3")})
        assert res["results"][0]["status"] == "succeeded" and calls == ["echo"]
        await c.close()
        # A reconnect starts unhalted.
        fresh = await echo_client()
        fresh.handlers["tools.execute"] = execute
        assert (await fresh.call("proposal.submit", {"proposal": proposal([tool_call("a")])}))["results"][0]["status"] == "succeeded"
        await fresh.close()

    run(go())


def test_client_disconnecting_mid_callback_harms_no_one():
    async def go():
        quitter = await echo_client()
        got_call = asyncio.Event()

        async def hang(params):
            got_call.set()
            await asyncio.sleep(60)

        quitter.handlers["tools.execute"] = hang
        pending = asyncio.create_task(quitter.call("proposal.submit", {"proposal": proposal([tool_call("h", "slow")])}))
        await asyncio.wait_for(got_call.wait(), 5)

        steady = await echo_client()

        async def execute(params):
            return params["parameters"]

        steady.handlers["tools.execute"] = execute
        await quitter.ws.close()
        with pytest.raises((ConnectionError, asyncio.CancelledError, websockets.ConnectionClosed)):
            await pending
        for i in range(5):
            res = await steady.call("proposal.submit", {"proposal": proposal([tool_call(f"s{i}", parameters={"i": i})], f"p{i}")})
            assert res["results"][0]["output"] == {"i": i}
        await steady.close()
        again = await authed()
        assert await again.call("events.count") == 0
        await again.close()

    run(go())


# --- policies from the state root and liveness ----------------------------------


def test_policies_from_the_state_root_apply_to_every_session():
    home = tempfile.mkdtemp(prefix="car-home-")
    os.makedirs(os.path.join(home, "policies"))
    with open(os.path.join(home, "policies", "10-deny.toml"), "w") as f:
        f.write('deny_tool = ["rm"]\n')
    with Daemon("--no-auth", home=home) as d:
        async def go():
            for _ in range(2):
                c = await Client.connect(d.url)
                # `rm` is full_access, which always needs an approval: approve the
                # operation (from another connection: self-approval is off) so the
                # file policy decides.
                a = await Client.connect(d.url)
                await a.call("permission.approve", {"action": tool_call("x", "rm"), "reason": "policy test"})
                await a.close()
                await c.call("tools.register", [{"name": "rm"}])
                res = await c.call("proposal.submit", {"proposal": proposal([tool_call("x", "rm")])})
                assert res["results"][0]["status"] == "rejected"
                assert "rm" in res["results"][0]["error"] and "tier" not in res["results"][0]["error"]
                assert c.server_requests == []
                await c.close()

        run(go())
        with open(os.path.join(home, "policies", "20-bad.toml"), "w") as f:
            f.write("deny_tool = [unclosed\n")

        async def refused():
            c = await Client.connect(d.url)
            r = await c.next_raw()
            assert r["error"]["code"] == -32603
            assert "20-bad.toml" in r["error"]["message"]
            await asyncio.wait_for(c.closed.wait(), 5)

        run(refused())


def test_silent_peer_is_closed_and_the_daemon_lives_on():
    env = {"CAR_WS_PING_INTERVAL_MS": "200", "CAR_WS_IDLE_TIMEOUT_MS": "800"}
    with Daemon("--no-auth", env=env) as d:
        host, port = d.url[len("ws://"):].strip("/").split(":")
        s = socket.create_connection((host, int(port)))
        s.sendall(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        s.settimeout(10)
        t0 = time.time()
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        elapsed = time.time() - t0
        s.close()
        assert b"101" in data.split(b"\r\n")[0]
        assert b"\x89" in data, "pings were sent"
        assert 0.5 < elapsed < 5, elapsed
        assert "silent" in d.text()

        async def alive():
            # A responsive client (websockets answers pings) is kept.
            c = await Client.connect(d.url, ping_interval=None)
            await asyncio.sleep(1.5)
            assert await c.call("events.count") == 0
            await c.close()

        run(alive())


def test_permission_pending_approve_reject_and_the_ledger_survives_a_restart():
    home = tempfile.mkdtemp(prefix="car-home-")
    p = proposal([
        tool_call("w", "write_file", parameters={"path": "/tmp/x"}),
        tool_call("r", "shell", parameters={"command": "rm -rf /tmp/y"}),
    ])

    async def first(url):
        c = await Client.connect(url)
        pending = (await c.call("permission.pending", {"proposal": p}))["pending"]
        assert [row["action_id"] for row in pending] == ["r"]
        assert pending[0]["decision"] == "needs_approval" and pending[0]["required"] == "full_access"
        rec = await c.call("permission.approve", {"fingerprint": pending[0]["fingerprint"],
                                                  "required_tier": pending[0]["required"], "reason": "reviewed"})
        assert rec["decision"] == "approved" and rec["reason"] == "reviewed"
        assert rec["reviewer"].startswith("car-server:")
        rec = await c.call("permission.reject", {"action": p["actions"][0], "reason": "no writes"})
        assert rec["decision"] == "rejected"
        r = await c.request("permission.approve", {"reason": "x"})
        assert r["error"] == {"code": -32602, "message": "invalid params: fingerprint is required"}
        await c.close()

    async def second(url):
        c = await Client.connect(url)
        decisions = {d["action_id"]: d["decision"] for d in (await c.call("permission.evaluate", {"proposal": p}))["decisions"]}
        assert decisions == {"w": "deny", "r": "allow"}
        assert (await c.call("permission.pending", {"proposal": p}))["pending"] == []
        await c.close()

    with Daemon("--no-auth", home=home) as d:
        run(first(d.url))
    with Daemon("--no-auth", home=home) as d:
        run(second(d.url))


def test_supervision_parks_matching_proposals_until_a_verdict():
    async def go():
        boss = await authed()
        sub = await boss.call("supervision.subscribe", {"filter": {"tools": ["deploy"]}})
        assert sub["subscribed"] is True and sub["supervisors"] >= 1 and sub["decision_timeout_ms"] > 0
        worker = await authed()
        # `deploy` is full_access, which always needs an approval (the tier gate
        # runs before supervision): approve the two operations used below.
        for params in ({"env": "prod", "ref": "abc"}, {}):
            await boss.call("permission.approve", {"action": tool_call("d", "deploy", parameters=params),
                                                   "reason": "supervision test"})
        await worker.call("tools.register", [{"name": "deploy"}, {"name": "echo"}])
        ran = []

        async def execute(params):
            ran.append(params["tool"])
            return "ok"

        worker.handlers["tools.execute"] = execute
        # Not matching the filter: runs unsupervised.
        res = await worker.call("proposal.submit", {"proposal": proposal([tool_call("e", "echo")], "p0")})
        assert res["results"][0]["status"] == "succeeded" and boss.notifications == []

        async def parked(pid):
            task = asyncio.create_task(worker.call("proposal.submit", {"proposal": proposal(
                [tool_call("d", "deploy", parameters={"env": "prod", "ref": "abc"})], pid)}))
            for _ in range(100):
                intents = [n for n in boss.notifications if n["method"] == "supervision.intent"
                           and n["params"]["proposal_id"] == pid]
                if intents:
                    return task, intents[0]["params"]
                await asyncio.sleep(0.05)
            raise AssertionError("no supervision.intent")

        task, intent = await parked("p1")
        assert intent["actions"][0]["tool"] == "deploy"
        assert intent["actions"][0]["parameter_keys"] == ["env", "ref"]
        assert len(intent["actions"][0]["parameters_digest"]) == 64
        assert intent["source"] == "test" and intent["session_id"]
        assert [i["id"] for i in (await boss.call("supervision.pending", {}))["intents"]] == [intent["id"]]
        assert not task.done() and ran == ["echo"]
        r = await boss.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "deny"}})
        assert r["error"]["code"] == -32602 and "reason" in r["error"]["message"]
        decided = await boss.call("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert decided["decided"] is True and decided["reviewer"].startswith("car-server:operator:sess-")
        res = await task
        assert res["results"][0]["status"] == "succeeded" and ran == ["echo", "deploy"]
        r = await boss.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert r["error"]["code"] == -32603 and "already decided" in r["error"]["message"]

        task, intent = await parked("p2")
        await boss.call("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "deny", "reason": "freeze"}})
        res = await task
        assert res["results"][0]["status"] == "rejected"
        assert res["results"][0]["error"] == "denied by supervisor: freeze"
        assert ran == ["echo", "deploy"]
        assert await boss.call("supervision.unsubscribe", {}) == {"subscribed": False, "was_subscribed": True}
        await boss.close()
        res = await worker.call("proposal.submit", {"proposal": proposal([tool_call("d", "deploy")], "p3")})
        assert res["results"][0]["status"] == "succeeded"
        await worker.close()

    run(go())


def test_supervision_fails_closed_without_a_verdict():
    with Daemon("--no-auth", env={"CAR_SUPERVISION_TIMEOUT_MS": "300"}) as d:
        async def go():
            boss = await Client.connect(d.url)
            await boss.call("supervision.subscribe", {})
            worker = await Client.connect(d.url)
            await worker.call("tools.register", [{"name": "echo"}])
            res = await worker.call("proposal.submit", {"proposal": proposal([tool_call("a")])})
            assert res["results"][0]["status"] == "rejected"
            assert "no supervision verdict within 300ms" in res["results"][0]["error"]
            intent = [n for n in boss.notifications if n["method"] == "supervision.intent"][0]["params"]
            r = await boss.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
            assert "expired" in r["error"]["message"]
            assert (await boss.call("supervision.pending"))["intents"] == []
            await boss.close()
            await worker.close()

        run(go())


def test_random_frames_never_break_the_connection():
    import random

    rng = random.Random(8)
    base = [
        {"jsonrpc": "2.0", "id": 1, "method": "state.set", "params": {"key": "k", "value": [1, {"a": None}]}},
        {"jsonrpc": "2.0", "id": "x", "method": "proposal.submit", "params": {"proposal": {"actions": [{"id": "a", "type": "state_write", "parameters": {"key": "z", "value": 1}}]}}},
        {"jsonrpc": "2.0", "id": 3, "method": "verify", "params": {"proposal": {"actions": []}}},
        {"jsonrpc": "2.0", "id": 4, "method": "events.query", "params": {"limit": 1}},
    ]
    values = [None, True, -1, 2 ** 70, 1.5, "", "s", [], {}, [1, 2], {"k": "v"}]

    def mutate(frame):
        f = json.loads(json.dumps(frame))
        for _ in range(rng.randint(1, 3)):
            target = f
            keys = []
            while isinstance(target, dict) and target and rng.random() < 0.6:
                k = rng.choice(list(target))
                keys.append(k)
                if not isinstance(target[k], dict):
                    break
                target = target[k]
            if isinstance(target, dict) and target:
                k = rng.choice(list(target))
                if rng.random() < 0.3:
                    del target[k]
                else:
                    target[k] = rng.choice(values)
        text = json.dumps(f)
        r = rng.random()
        if r < 0.15:
            text = text[: rng.randint(0, len(text))]
        elif r < 0.25:
            i = rng.randint(0, max(0, len(text) - 1))
            text = text[:i] + rng.choice("{}[]\",:\\x") + text[i + 1:]
        return text

    async def go():
        c = await authed()
        await c.call("tools.register", [{"name": "echo"}])
        for _ in range(300):
            await c.send_raw(mutate(rng.choice(base)))
        await asyncio.sleep(0.5)
        # Every answer is a well-formed JSON-RPC response.
        while not c.raw.empty():
            r = c.raw.get_nowait()
            for one in (r if isinstance(r, list) else [r]):
                assert one["jsonrpc"] == "2.0" and "id" in one
                assert ("result" in one) != ("error" in one)
                if "error" in one:
                    assert one["error"]["code"] in (-32700, -32600, -32601, -32602, -32603), one
        assert await c.call("state.set", {"key": "after", "value": 1}) == "ok"
        await c.close()

    run(go())


def test_token_from_a_file_is_read_and_the_file_deleted():
    fd, path = tempfile.mkstemp(prefix="car-token-")
    with os.fdopen(fd, "w") as f:
        f.write("  file-token-123\n")
    with Daemon("--auth-token-file", path) as d:
        assert not os.path.exists(path)
        assert open(d.token_file()).read() == "file-token-123"

        async def go():
            c = await authed(d.url, "file-token-123")
            await c.close()

        run(go())
    # A blank CAR_AUTH_TOKEN counts as unset: a fresh token is generated.
    with Daemon(env={"CAR_AUTH_TOKEN": "   "}) as d:
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", open(d.token_file()).read())


def _ws_frame(text):
    payload = text.encode()
    n = len(payload)
    head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big"))
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_silent_peer_with_a_callback_in_flight_is_closed_and_its_callback_cancelled():
    env = {"CAR_WS_PING_INTERVAL_MS": "200", "CAR_WS_IDLE_TIMEOUT_MS": "800"}
    with Daemon("--no-auth", env=env) as d:
        host, port = d.url[len("ws://"):].strip("/").split(":")
        s = socket.create_connection((host, int(port)))
        s.sendall(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        s.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(1)
        assert data.startswith(b"HTTP/1.1 101")
        s.sendall(_ws_frame(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools.register", "params": [{"name": "t"}]})))
        # Requests run concurrently: the tool must be registered before the
        # submission is sent, or the submission can be admitted first.
        data = b""
        while b'"id":1,"result"' not in data:
            chunk = s.recv(4096)
            assert chunk, data
            data += chunk
        s.sendall(_ws_frame(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "proposal.submit",
                                        "params": {"proposal": proposal([tool_call("a", "t")])}})))
        data = b""
        while b"tools.execute" not in data:
            chunk = s.recv(4096)
            assert chunk, data
            data += chunk
        # Now silent: no pong, no answer. The daemon closes us and gives up the callback.
        t0 = time.time()
        while s.recv(4096):
            pass
        assert time.time() - t0 < 5
        s.close()
        for _ in range(50):
            if "cancelled 1 tool callback" in d.text():
                break
            time.sleep(0.05)
        assert "silent" in d.text() and "cancelled 1 tool callback" in d.text(), d.text()

        async def alive():
            c = await Client.connect(d.url)
            assert await c.call("tools.list") == {"tools": [], "count": 0}
            await c.close()

        run(alive())


def test_a_detached_tool_whose_client_cannot_start_it_fails_and_streams_nothing():
    """The client is asked (`tools.execute` with `detached: true`; the
    streaming protocol is in test_streaming.py); a client with no handler
    answers an error, which fails the action, and no chunk is streamed."""
    async def go():
        c = await authed()
        assert await c.call("tools.stream.subscribe", {}) == {"subscribed": True}
        assert await c.call("tools.stream.subscribe", {}) == {"subscribed": True}
        await c.call("tools.register", [{"name": "tail"}])
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("s", "tail", invocation_mode="streaming")])})
        r = res["results"][0]
        assert r["status"] == "failed" and "no handler" in r["error"], r
        assert [m["params"]["detached"] for m in c.server_requests] == [True]
        assert [n for n in c.notifications if n["method"] == "tools.stream.event"] == []
        await c.close()

    run(go())


# --- permission tiers at submit --------------------------------------------------


def test_submit_refuses_actions_above_the_session_tier_unless_approved():
    async def go():
        c = await echo_client()
        await c.call("tools.register", [{"name": "deploy"}])
        ran = []

        async def execute(params):
            ran.append(params["action_id"])
            return "ok"

        c.handlers["tools.execute"] = execute
        # Unique parameters: approvals are keyed by the operation, daemon-wide.
        target = f"prod-{time.time_ns()}"
        deploy = tool_call("d", "deploy", parameters={"target": target})
        cl = await c.call("permission.classify", {"proposal": proposal([deploy])})
        assert cl["classifications"][0]["required_tier"] == "full_access"

        # sandbox_edit (the default) < full_access: refused as a whole, nothing runs.
        assert await c.call("permission.get_tier") == {"granted_tier": "sandbox_edit"}
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("e", "echo"), deploy])})
        assert [r["status"] for r in res["results"]] == ["rejected", "rejected"]
        reason = res["results"][1]["error"]
        assert res["results"][0]["error"] == reason
        assert "permission tier escalated" in reason
        assert "`d` requires `full_access`" in reason and "granted only `sandbox_edit`" in reason
        assert "`e`" not in reason, "only the escalated action is named"
        assert res["cost"]["actions_rejected"] == 2
        assert ran == [] and c.server_requests == []

        # read_only refuses even sandbox_edit actions.
        await c.call("permission.set_tier", {"tier": "read_only"})
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("e", "echo")], "p2")})
        assert res["results"][0]["status"] == "rejected"
        assert "`e` requires `sandbox_edit`" in res["results"][0]["error"]
        assert "granted only `read_only`" in res["results"][0]["error"]
        assert ran == []

        # Granted full_access: still refused, as permission.evaluate says
        # (full_access always needs an approval).
        await c.call("permission.set_tier", {"tier": "full_access"})
        ev = await c.call("permission.evaluate", {"proposal": proposal([deploy])})
        assert ev["decisions"][0]["decision"] == "needs_approval"
        res = await c.call("proposal.submit", {"proposal": proposal([deploy], "p3")})
        assert res["results"][0]["status"] == "rejected" and ran == []
        assert "approval required: action `d` is `full_access`" in res["results"][0]["error"]

        # Back at sandbox_edit, an approval of the operation lets it run.
        await c.call("permission.set_tier", {"tier": "sandbox_edit"})
        pending = (await c.call("permission.pending", {"proposal": proposal([deploy])}))["pending"]
        assert [p["action_id"] for p in pending] == ["d"]
        # By another connection: this one's own approval would not count.
        reviewer = await authed()
        rec = await reviewer.call("permission.approve", {"fingerprint": pending[0]["fingerprint"],
                                                         "required_tier": "full_access", "reason": "release day"})
        assert rec["reviewer"].startswith("car-server:operator:sess-")
        await reviewer.close()
        res = await c.call("proposal.submit", {"proposal": proposal([deploy], "p4")})
        assert res["results"][0]["status"] == "succeeded" and ran == ["d"]
        await c.call("permission.set_tier", {"tier": "full_access"})
        res = await c.call("proposal.submit", {"proposal": proposal([deploy], "p4b")})
        assert res["results"][0]["status"] == "succeeded" and ran == ["d", "d"]

        # A rejected operation is refused at any tier.
        other = tool_call("d2", "deploy", parameters={"target": target + "-b"})
        await c.call("permission.reject", {"action": other, "reason": "freeze"})
        await c.call("permission.set_tier", {"tier": "full_access"})
        res = await c.call("proposal.submit", {"proposal": proposal([other], "p5")})
        assert res["results"][0]["status"] == "rejected"
        assert "`d2` was previously rejected" in res["results"][0]["error"] and "freeze" in res["results"][0]["error"]
        assert ran == ["d", "d"]
        # The tier is per connection: a new one starts at sandbox_edit.
        fresh = await echo_client()
        await fresh.call("tools.register", [{"name": "deploy"}])
        res = await fresh.call("proposal.submit", {"proposal": proposal([tool_call("d3", "deploy", parameters={"t": target})])})
        assert res["results"][0]["status"] == "rejected" and "granted only `sandbox_edit`" in res["results"][0]["error"]
        assert fresh.server_requests == []
        await fresh.close()
        await c.close()

    run(go())


def test_supervision_judges_classified_reversibility_and_a_leaving_submitter_withdraws():
    async def go():
        boss = await authed()
        await boss.call("supervision.subscribe", {"filter": {"min_reversibility": "irreversible", "tools": ["notify"]}})
        r = await boss.request("supervision.subscribe", {"filter": {"tools": "notify"}})
        assert r["error"]["code"] == -32602 and "filter.tools" in r["error"]["message"]
        worker = await authed()
        await worker.call("tools.register", [{"name": "notify"}, {"name": "read_file"}])
        ran = []

        async def execute(params):
            ran.append(params["action_id"])
            return "ok"

        worker.handlers["tools.execute"] = execute
        # read_file classifies reversible: below the minimum, unsupervised.
        res = await worker.call("proposal.submit", {"proposal": proposal(
            [tool_call("r", "read_file", parameters={"path": "x"}, reversibility="reversible")], "q0")})
        assert res["results"][0]["status"] == "succeeded"
        # `notify` declares itself reversible but classifies irreversible: parked.
        pid = f"q-{time.time_ns()}"
        task = asyncio.create_task(worker.call("proposal.submit", {"proposal": proposal(
            [tool_call("n", "notify", parameters={"to": "ops", "body": "secret"}, reversibility="reversible")], pid)}))
        intent = None
        for _ in range(200):
            mine = [n["params"] for n in boss.notifications
                    if n["method"] == "supervision.intent" and n["params"]["proposal_id"] == pid]
            if mine:
                intent = mine[0]
                break
            await asyncio.sleep(0.05)
        assert intent is not None, "no supervision.intent"
        assert intent["reversibility"] == "irreversible"
        assert intent["actions"][0]["reversibility"] == "irreversible"
        assert intent["actions"][0]["parameter_keys"] == ["body", "to"]
        assert "secret" not in json.dumps(intent), "intents carry key names and a digest, never values"
        # A non-supervisor may neither list nor decide.
        outsider = await authed()
        r = await outsider.request("supervision.pending")
        assert r["error"]["code"] == -32603 and "not a supervisor" in r["error"]["message"]
        r = await outsider.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert r["error"]["code"] == -32603 and "not a supervisor" in r["error"]["message"]
        await outsider.close()
        # The submitter leaves while parked: its intent is withdrawn.
        await worker.ws.close()
        with pytest.raises((ConnectionError, asyncio.CancelledError, websockets.ConnectionClosed)):
            await task
        for _ in range(100):
            if intent["id"] not in [i["id"] for i in (await boss.call("supervision.pending"))["intents"]]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the intent of a departed submitter stayed pending")
        r = await boss.request("supervision.decide", {"intent_id": intent["id"], "decision": {"kind": "allow"}})
        assert r["error"]["code"] == -32603 and "expired" in r["error"]["message"]
        assert ran == ["r"], "the withdrawn proposal never ran"
        assert await boss.call("supervision.unsubscribe") == {"subscribed": False, "was_subscribed": True}
        await boss.close()

    run(go())


# --- handler deadline (-32004) ---------------------------------------------------


def test_handler_deadline_32004_cancels_the_callback_and_the_connection_goes_on():
    """CAR_HANDLER_TIMEOUT=1: proposal.submit's deadline is derived from its
    budgets (2 x timeout_ms + 15 s grace = 21.1 s here), so a callback inside
    the budget is not abandoned at 1 s. The tool's rate limit (1 call per 17 s)
    spends time outside the budget, so the second callback is still unanswered
    when the derived deadline passes: -32004, a tools.cancel for it, and the
    connection stays usable."""
    with Daemon("--no-auth", env={"CAR_HANDLER_TIMEOUT": "1"}) as d:
        async def go():
            c = await Client.connect(d.url)
            await c.call("tools.register", [
                {"name": "slowish"},
                {"name": "metered", "rate_limit": {"max_calls": 1, "interval_secs": 17}},
            ])

            async def execute(params):
                if params["tool"] == "slowish":
                    await asyncio.sleep(2.5)
                    return "late but in budget"
                if params["action_id"] == "m1":
                    return "first"
                await asyncio.sleep(120)  # the second metered call never answers

            c.handlers["tools.execute"] = execute
            # In budget (timeout_ms 5 s): answered after 2.5 s, past the flat 1 s.
            res = await c.call("proposal.submit", {"proposal": proposal(
                [tool_call("s", "slowish", timeout_ms=5000)], "in-budget")})
            assert res["results"][0]["status"] == "succeeded"
            assert res["results"][0]["output"] == "late but in budget"

            p = proposal([
                tool_call("m1", "metered", timeout_ms=100),
                tool_call("m2", "metered", timeout_ms=6000, depends_on=["m1"]),
            ], "over")
            r = await c.request("proposal.submit", {"proposal": p}, timeout=50)
            assert r["error"]["code"] == -32004, r
            assert r["error"]["message"].startswith(
                "handler 'proposal.submit' exceeded its 21100ms response deadline"), r["error"]["message"]
            await asyncio.sleep(0.3)
            m2 = [q for q in c.server_requests if q["params"]["action_id"] == "m2"]
            assert len(m2) == 1, "the second call reached the client"
            cancels = [n["params"] for n in c.notifications if n["method"] == "tools.cancel"]
            assert cancels == [{"request_id": m2[0]["id"], "action_id": "m2",
                                "reason": "tool 'metered' callback cancelled: its handler was abandoned"}]
            # The connection is still usable: the late answer is ignored, calls work.
            await c.send_raw(json.dumps({"jsonrpc": "2.0", "id": m2[0]["id"], "result": "too late"}))
            assert await c.call("state.set", {"key": "after", "value": 1}) == "ok"
            assert await c.call("state.get", {"key": "after"}) == 1
            res = await c.call("proposal.submit", {"proposal": proposal([tool_call("s2", "slowish", timeout_ms=5000)], "again")})
            assert res["results"][0]["status"] == "succeeded"
            await c.close()

        asyncio.run(asyncio.wait_for(go(), 90))
        assert "abandoned or unknown" in d.text() or "unknown or abandoned" in d.text()


def test_a_client_tool_error_with_model_retry_is_reported_to_the_model_and_not_retried():
    """`data.model_retry: true` on a `tools.execute` error is the spec's
    ModelRetry: `model retry (n of 2): ...`, never retried by the engine."""
    async def go():
        c = await authed(URL)
        await c.call("session.init", {"client_id": "model-retry"})
        await c.call("tools.register", [{"name": "search"}])
        calls = []

        async def execute(params):
            calls.append(params)
            raise ToolError("use plain keywords", model_retry=True)

        c.handlers["tools.execute"] = execute
        for n, want in [(1, "model retry (1 of 2): "), (2, "model retry (2 of 2): "), (3, "model retry limit reached")]:
            res = await c.call("proposal.submit", {"proposal": proposal(
                [tool_call("s", "search", failure_behavior="retry", max_retries=3)], f"mr-{n}")})
            assert res["results"][0]["error"].startswith(want), res
            assert len(calls) == n, "never retried by the engine"
        await c.close()

    run(go())


def test_a_client_tool_logs_into_the_event_log_while_its_call_is_in_flight():
    """`tools.log {request_id, level, message, data?}` while serving a call
    records a `ToolLog` event for its action; after the call, or for another
    connection's call, it is `call_not_in_flight`."""
    async def go():
        c = await authed(URL)
        await c.call("session.init", {"client_id": "tool-log"})
        await c.call("tools.register", [{"name": "fetch"}])
        other = await authed(URL)
        seen = {}

        async def execute(params):
            seen["id"] = params["request_id"]
            assert (await c.call("tools.log", {"request_id": params["request_id"], "level": "info",
                                               "message": "fetching", "data": {"n": 1}})) == {"logged": True}
            r = await c.request("tools.log", {"request_id": params["request_id"], "level": "loud", "message": "m"})
            assert r["error"]["code"] == -32602 and "level" in r["error"]["message"], r
            r = await other.request("tools.log", {"request_id": params["request_id"], "level": "info", "message": "x"})
            assert r["error"]["data"]["code"] == "call_not_in_flight", r
            return "ok"

        c.handlers["tools.execute"] = execute
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("f", "fetch")], "log-1")})
        assert res["results"][0]["status"] == "succeeded", res
        logs = (await c.call("events.query", {"kinds": ["ToolLog"]}))["events"]
        assert [(e["action_id"], e["data"]["message"], e["data"]["data"]) for e in logs] == [("f", "fetching", {"n": 1})]
        r = await c.request("tools.log", {"request_id": seen["id"], "level": "info", "message": "late"})
        assert r["error"]["data"]["code"] == "call_not_in_flight", r
        # A call with a timeout carries its deadline.
        res = await c.call("proposal.submit", {"proposal": proposal([tool_call("g", "fetch", timeout_ms=5000)], "log-2")})
        assert res["results"][0]["status"] == "succeeded", res
        assert [m["params"].get("deadline") is not None for m in c.server_requests] == [False, True]
        for x in (c, other):
            await x.close()

    run(go())
