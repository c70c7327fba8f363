"""MCP over streamable HTTP, driven by the official Python SDK (``mcp`` on PyPI).

1. The gateway, ``car mcp serve --http 127.0.0.1:0``, in front of
   ``examples/mcp_upstream.rs``: list (a denied tool hidden), call, a denied
   call, schema-rejected arguments, sessions (``MCP-Session-Id``; an unknown
   one is 404), the ``Origin`` rule, ``GET /mcp`` 405, and the event log
   written at shutdown.
2. The daemon's MCP endpoint (``car-server``, ``POST /mcp``, ``GET
   /mcp/health``): protocol version negotiation, the ``Origin`` and
   ``MCP-Protocol-Version`` rules, ``isError`` for arguments the tool schema
   rejects, every call through the daemon's admission stage (its
   ``permissions.toml``), ``submit_proposal`` only with the daemon token.

Binaries from ``cargo build --all-targets --all-features``.
"""
import asyncio
import json
import os
import pathlib
import signal
import subprocess
import time
import urllib.error
import urllib.request

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = pathlib.Path(__file__).resolve().parents[3]
DEBUG = ROOT / "target" / os.environ.get("CARGO_BUILD_TARGET", "x86_64-unknown-linux-gnu") / "debug"
UPSTREAM = str(DEBUG / "examples" / "mcp_upstream")
CAR = os.environ.get("CAR_BIN", str(DEBUG / "car"))
CAR_SERVER = os.environ.get("CAR_SERVER_BIN", str(DEBUG / "car-server"))
ACCEPT = "application/json, text/event-stream"


class Proc:
    """A process whose stderr goes to a file; `url` is read from the line
    starting with `marker`. Stopped with SIGTERM (then killed) on exit."""

    def __init__(self, args, log, marker, env=None):
        self.log = log
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(log, "w"), env=env)
        self.url = None
        deadline = time.monotonic() + 120
        while self.url is None:
            assert self.proc.poll() is None, f"{args[0]} exited: {pathlib.Path(log).read_text()}"
            assert time.monotonic() < deadline, f"no `{marker}` line: {pathlib.Path(log).read_text()}"
            for line in pathlib.Path(log).read_text().splitlines():
                if marker in line:
                    self.url = line.split(marker, 1)[1].split()[0]
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def post(url, body, headers=None):
    """One raw POST; returns (status, headers, parsed JSON-RPC message or body)."""
    h = {"Content-Type": "application/json", "Accept": ACCEPT}
    h.update(headers or {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, parse_body(r.read().decode(), r.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as e:
        return e.code, e.headers, parse_body(e.read().decode(), e.headers.get("Content-Type", ""))


def parse_body(text, ctype):
    if "text/event-stream" in ctype:
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])
        return None
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return text


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {}, method="GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def initialize(url, version="2025-06-18", headers=None):
    return post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}, headers)


async def with_session(url, body, headers=None):
    client = create_mcp_http_client(headers=headers)
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def text(result):
    return "\n".join(c.text for c in result.content if c.type == "text")


def test_the_gateway_over_streamable_http(tmp_path):
    assert os.path.exists(UPSTREAM), f"{UPSTREAM}: build with cargo build --all-targets --all-features"
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f"""
preset = "open"
deny = [{{ tool = "up_fail" }}]

[mcp.servers.t]
command = {json.dumps(UPSTREAM)}
prefix = "up_"
""")
    events = tmp_path / "events.json"
    args = [CAR, "mcp", "serve", "--config", str(cfg), "--http", "127.0.0.1:0", "--events", str(events)]
    with Proc(args, tmp_path / "gateway.log", "listening on ") as gw:
        url = gw.url

        async def body(s):
            names = [t.name for t in (await s.list_tools()).tools]
            assert "up_echo" in names and "up_fail" not in names, names
            r = await s.call_tool("up_echo", {"text": "over http"})
            assert not r.is_error and text(r) == "over http", r
            r = await s.call_tool("up_add", {"a": 1, "b": 2})
            assert r.structured_content == {"sum": 3.0}, r
            r = await s.call_tool("up_fail", {})
            assert r.is_error and "deny" in text(r), r
            r = await s.call_tool("up_echo", {"text": 7})
            assert r.is_error, r

        asyncio.run(with_session(url, body))

        # Sessions: initialize hands out MCP-Session-Id; an unknown one is 404.
        status, headers, msg = initialize(url)
        assert status == 200 and msg["result"]["serverInfo"]["name"] == "car-mcp-gateway", (status, msg)
        assert headers.get("Mcp-Session-Id"), dict(headers)
        status, _, _ = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                            {"Mcp-Session-Id": "no-such-session", "MCP-Protocol-Version": "2025-06-18"})
        assert status == 404, status
        # The Origin rule: a foreign origin never reaches dispatch; loopback passes.
        status, _, msg = initialize(url, headers={"Origin": "http://evil.example"})
        assert status == 403 and msg == {"error": "origin not allowed"}, (status, msg)
        status, _, msg = initialize(url, headers={"Origin": "null"})
        assert status == 403, status
        status, _, msg = initialize(url, headers={"Origin": "http://localhost:3000"})
        assert status == 200 and "result" in msg, (status, msg)
        status, headers, _ = get(url)
        assert status == 405 and "POST" in headers.get("Allow", ""), status
    # SIGTERM: the event log (hash-chained) is written on the way out.
    doc = json.loads(events.read_text())
    assert doc["chain"].get("verified", 0) == doc["events"]["count"] > 0, doc["chain"]
    logged = json.dumps(doc["events"]["events"])
    assert "up_echo" in logged and "up_fail" in logged, logged[:2000]


def start_daemon(tmp_path, permissions=None, token="daemon-token-for-tests"):
    home = tmp_path / "home"
    home.mkdir()
    if permissions:
        (home / "permissions.toml").write_text(permissions)
    env = dict(os.environ, CAR_HOME=str(home))
    args = [CAR_SERVER, "--port", "0", "--auth-token", token]
    return Proc(args, tmp_path / "daemon.log", "MCP endpoint on ", env=env)


def test_the_daemon_mcp_endpoint(tmp_path):
    perms = 'deny = [{ tool = "simulate" }]\n'
    with start_daemon(tmp_path, perms) as d:
        url = d.url
        health = url + "/health"
        status, _, body = get(health, {"Origin": "http://evil.example"})
        assert status == 200, status
        h = json.loads(body)
        assert h["status"] == "ok" and h["protocol_version"] == "2025-11-25", h
        assert h["supported_versions"] == ["2024-11-05", "2025-06-18", "2025-11-25"], h

        # Version negotiation: a supported request is echoed, anything else gets the newest.
        for asked, got in [("2024-11-05", "2024-11-05"), ("2025-06-18", "2025-06-18"),
                           ("2025-03-26", "2025-11-25"), ("1999-01-01", "2025-11-25")]:
            status, headers, msg = initialize(url, asked)
            assert status == 200 and msg["result"]["protocolVersion"] == got, (asked, status, msg)
            assert headers.get("Mcp-Session-Id"), dict(headers)
        status, _, msg = initialize(url, headers={"MCP-Protocol-Version": "2099-01-01"})
        assert status == 400, (status, msg)
        assert msg["error"] == "unsupported MCP-Protocol-Version" and msg["requested"] == "2099-01-01", msg
        assert msg["supported"] == ["2024-11-05", "2025-06-18", "2025-11-25"], msg
        status, _, msg = initialize(url, headers={"Origin": "https://attacker.example"})
        assert status == 403 and msg == {"error": "origin not allowed"}, (status, msg)
        status, headers, _ = get(url)
        assert status == 405 and headers.get("Allow") == "POST, DELETE", (status, dict(headers))

        proposal = {"id": "p", "actions": [
            {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 1}}]}

        async def body(s):
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) >= {"verify", "simulate", "optimize", "transaction_check", "permission_classify",
                                  "explain_permission", "match_shell_command", "policy_check",
                                  "submit_proposal"}, list(tools)
            assert tools["verify"].input_schema["required"] == ["proposal"]
            r = await s.call_tool("verify", {"proposal": proposal})
            assert not r.is_error and r.structured_content is not None, r
            assert r.structured_content.get("valid") is True, r.structured_content
            # Schema-rejected arguments are an isError result, not a JSON-RPC error.
            r = await s.call_tool("verify", {"proposal": "not an object"})
            assert r.is_error, r
            r = await s.call_tool("verify", {})
            assert r.is_error, r
            # The daemon's admission document denies `simulate`.
            r = await s.call_tool("simulate", {"proposal": proposal})
            assert r.is_error and "deny" in text(r), r
            r = await s.call_tool("explain_permission", {"proposal": proposal})
            assert not r.is_error and r.structured_content["items"], r
            rules = {"allow": ["git status"], "deny": ["git push *"]}
            r = await s.call_tool("match_shell_command", {"command": "git status", "rules": rules})
            assert not r.is_error and text(r) == "allow", r
            # The tier layer reads any tool's `command`: a full-access command is
            # refused at admission (sessions hold `sandbox_edit`), never matched.
            r = await s.call_tool("match_shell_command", {"command": "rm -rf /", "rules": rules})
            assert r.is_error and "tier" in text(r), r
            # submit_proposal without the daemon token is refused.
            r = await s.call_tool("submit_proposal", {"proposal": proposal})
            assert r.is_error and "Authorization" in text(r), r
            try:
                await s.call_tool("no_such_tool", {})
                raise AssertionError("an unknown tool is a JSON-RPC error")
            except Exception as e:  # McpError
                assert "no_such_tool" in str(e), e

        asyncio.run(with_session(url, body))

        async def authed(s):
            r = await s.call_tool("submit_proposal", {"proposal": proposal})
            assert not r.is_error, r
            assert r.structured_content["results"][0]["status"] == "succeeded", r.structured_content

        asyncio.run(with_session(url, authed, {"Authorization": "Bearer daemon-token-for-tests"}))


def test_the_daemon_mcp_endpoint_can_be_disabled(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, CAR_HOME=str(home), CAR_MCP_BIND="disabled")
    args = [CAR_SERVER, "--port", "0", "--no-auth"]
    with Proc(args, tmp_path / "daemon.log", "listening on ", env=env) as d:
        assert d.url.startswith("ws://"), d.url
        assert "MCP endpoint" not in pathlib.Path(tmp_path / "daemon.log").read_text()
