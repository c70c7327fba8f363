"""MCP from Python.

1. The binding: an ``mcp`` section of the admission document (the same JSON
   every front end reads) imports the tools of a real MCP server over stdio.
2. The gateway (``car mcp serve``) driven by the official Python SDK (``mcp``
   on PyPI) as its client: list, call, a denied call, schema-rejected
   arguments, an ask approved and one denied (the durable approvals store),
   a drifted tool refused under ``pin``.

The upstream is ``examples/mcp_upstream.rs`` and the gateway the ``car``
binary, both from ``cargo build --all-targets --all-features``.
"""
import asyncio
import json
import os
import pathlib

import car_runtime as car
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[3]
DEBUG = ROOT / "target" / os.environ.get("CARGO_BUILD_TARGET", "x86_64-unknown-linux-gnu") / "debug"
UPSTREAM = str(DEBUG / "examples" / "mcp_upstream")
CAR = os.environ.get("CAR_BIN", str(DEBUG / "car"))


def test_binding_imports_mcp_tools_through_the_admission_document():
    assert os.path.exists(UPSTREAM), f"{UPSTREAM}: build with cargo build --all-targets --all-features"
    rt = car.CarRuntime()
    rt.set_permissions({"deny": [{"tool": "up_fail"}],
                        "mcp": {"servers": {"t": {"command": UPSTREAM, "prefix": "up_"}}}})
    tools = {t["name"]: t for t in json.loads(rt.list_tools())}
    assert tools["up_echo"]["source"] == "mcp"
    host = []

    def run(tool, params=None):
        action = {"id": "a", "type": "tool_call", "tool": tool, "parameters": params or {}}
        out = json.loads(rt.execute_proposal({"id": "p", "actions": [action]}, lambda c: host.append(c) or {}))
        return out["results"][0]

    r = run("up_echo", {"text": "from python"})
    assert r["status"] == "succeeded" and r["output"] == "from python", r
    assert run("up_add", {"a": 1, "b": 2})["output"] == {"sum": 3.0}
    assert run("up_fail")["status"] == "rejected"
    assert run("up_echo", {"text": 7})["status"] != "succeeded"
    assert host == [], "MCP tools never reach the host's callback"


def gateway_config(tmp_path, pin=False):
    desc = tmp_path / "description.txt"
    desc.write_text("takes x")
    approvals = tmp_path / "approvals"
    approvals.mkdir()
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f"""
preset = "open"
approvals_dir = {json.dumps(str(approvals))}
deny = [{{ tool = "up_fail" }}]
ask = [{{ tool = "up_add" }}]

[mcp.servers.t]
command = {json.dumps(UPSTREAM)}
prefix = "up_"
pin = {str(pin).lower()}
env = {{ MCP_UPSTREAM_DESCRIPTION = {json.dumps(str(desc))} }}
""")
    return cfg, desc, approvals


async def with_gateway(cfg, body, *extra):
    params = StdioServerParameters(command=CAR, args=["mcp", "serve", "--config", str(cfg), *extra])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)


def text(result):
    return "\n".join(c.text for c in result.content if c.type == "text")


def test_gateway_lists_calls_and_refuses_through_the_admission_stage(tmp_path):
    assert os.path.exists(CAR), f"{CAR}: build with cargo build --all-features"
    cfg, _, approvals = gateway_config(tmp_path)

    async def body(s):
        names = sorted(t.name for t in (await s.list_tools()).tools)
        assert names == ["up_add", "up_calls", "up_die", "up_drifty", "up_echo"], "up_fail is hidden: " + str(names)

        r = await s.call_tool("up_echo", {"text": "through the gateway"})
        assert not r.is_error and text(r) == "through the gateway"

        r = await s.call_tool("up_fail", {})
        assert r.is_error and "deny" in text(r), text(r)

        r = await s.call_tool("up_echo", {"text": 1})
        assert r.is_error and "text" in text(r), text(r)

        # An ask: refused naming the approval key; approved in the durable
        # store, the same call then runs; a denied answer refuses it.
        r = await s.call_tool("up_add", {"a": 2, "b": 5})
        assert r.is_error and "approval required" in text(r), text(r)
        pending = json.loads(car.approvals_pending(str(approvals)))["pending"]
        car.approval_resolve(str(approvals), pending[0]["key"], "allow", "ok")
        r = await s.call_tool("up_add", {"a": 2, "b": 5})
        assert not r.is_error, text(r)
        assert r.structured_content == {"sum": 7.0}

        r = await s.call_tool("up_add", {"a": 1, "b": 1})
        assert r.is_error
        pending = json.loads(car.approvals_pending(str(approvals)))["pending"]
        car.approval_resolve(str(approvals), pending[0]["key"], "deny", "not now")
        r = await s.call_tool("up_add", {"a": 1, "b": 1})
        assert r.is_error and "denied" in text(r), text(r)

        # Only admitted calls reached the upstream: echo and one add.
        r = await s.call_tool("up_calls", {})
        assert text(r) == "3", text(r)

    asyncio.run(with_gateway(cfg, body))


def test_gateway_refuses_a_drifted_tool_under_pin(tmp_path):
    cfg, desc, _ = gateway_config(tmp_path, pin=True)

    async def body(s):
        r = await s.call_tool("up_drifty", {"x": "1"})
        assert not r.is_error and text(r) == "x=1"
        desc.write_text("takes x and sends it elsewhere")
        r = await s.call_tool("up_die", {})
        assert r.is_error
        r = await s.call_tool("up_drifty", {"x": "2"})
        assert r.is_error and "pin = true" in text(r), text(r)
        r = await s.call_tool("up_echo", {"text": "still fine"})
        assert not r.is_error and text(r) == "still fine"

    asyncio.run(with_gateway(cfg, body))


def test_gateway_plan_mode_offers_only_read_tools(tmp_path):
    cfg, _, _ = gateway_config(tmp_path)

    async def body(s):
        names = [t.name for t in (await s.list_tools()).tools]
        assert names == ["up_echo"], names
        r = await s.call_tool("up_calls", {})
        assert r.is_error and "plan mode" in text(r), text(r)

    asyncio.run(with_gateway(cfg, body, "--plan-mode"))


def test_the_readme_gateway_in_front_of_server_filesystem(tmp_path):
    """The README's three lines (with a temporary directory for /srv/data),
    npx resolving the server from tests/mcp/node_modules."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("readme example")
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f"""[mcp.servers.fs]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", {json.dumps(str(data))}]
""")

    async def body(s):
        names = {t.name for t in (await s.list_tools()).tools}
        assert {"read_text_file", "write_file", "list_directory"} <= names, names
        r = await s.call_tool("read_text_file", {"path": str(data / "notes.txt")})
        assert not r.is_error and "readme example" in text(r), text(r)
        # standard preset: a destructive tool asks; with no approver it is refused.
        r = await s.call_tool("write_file", {"path": str(data / "new.txt"), "content": "x"})
        assert r.is_error and "approval required" in text(r), text(r)
        assert not (data / "new.txt").exists()

    params = StdioServerParameters(command=CAR, args=["mcp", "serve", "--config", str(cfg)],
                                   cwd=str(ROOT / "tests" / "mcp"))

    async def run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await body(session)

    asyncio.run(run())
