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
import sys

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
    status = json.loads(rt.mcp_status())["servers"]["t"]
    assert status["connections"] == 1 and len(status["toolset_hash"]) == 64 and status["drift"] == []
    echo = next(x for x in status["tools"] if x["name"] == "up_echo")
    assert echo["accepted_hash"] == echo["current_hash"] and echo["refused"] is False


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
            session.car_init = await session.initialize()
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


def test_gateway_plan_mode_is_the_admission_stage_plan_layer(tmp_path):
    """`plan_mode = true` in the document does what --plan-mode does, and the
    refusal is an admission decision of the `plan` layer in the event log."""
    cfg, _, _ = gateway_config(tmp_path)
    cfg.write_text("plan_mode = true\n" + cfg.read_text())
    events = tmp_path / "events.json"

    async def body(s):
        assert [t.name for t in (await s.list_tools()).tools] == ["up_echo"]
        for tool, args in [("up_calls", {}), ("up_add", {"a": 1, "b": 2}), ("up_drifty", {"x": "1"})]:
            r = await s.call_tool(tool, args)
            assert r.is_error and "removed by plan mode" in text(r), (tool, text(r))
        r = await s.call_tool("up_echo", {"text": "reads"})
        assert not r.is_error and text(r) == "reads"

    asyncio.run(with_gateway(cfg, body, "--events", str(events)))
    logged = json.loads(events.read_text())["events"]["events"]
    plan = [e for e in logged if e["kind"] == "AdmissionDecided" and e["data"]["layer"] == "plan"]
    assert len(plan) == 3 and all(e["data"]["verdict"] == "deny" for e in plan), plan
    assert sorted(e["data"]["tool"] for e in plan) == ["up_add", "up_calls", "up_drifty"], plan


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


EVERYTHING = ROOT / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def everything_config(tmp_path, extra=""):
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f"""
preset = "open"
{extra}

[mcp.servers.ev]
command = "node"
args = [{json.dumps(str(EVERYTHING))}]
prefix = "ev_"
resources = true
prompts = true
""")
    return cfg


def test_gateway_forwards_resources_prompts_and_logging_through_admission(tmp_path):
    """`resources = true` / `prompts = true`: server-everything's resources,
    templates, prompts, completion, logging and subscriptions through the
    gateway; every read and prompt is an admitted, logged call."""
    assert EVERYTHING.exists(), f"{EVERYTHING}: npm ci in tests/mcp"
    events = tmp_path / "events.json"

    async def body(s):
        init_caps = s.car_init.capabilities
        assert init_caps.resources and init_caps.resources.subscribe and init_caps.prompts, init_caps
        assert init_caps.logging is not None and init_caps.completions is not None, init_caps
        names = {t.name for t in (await s.list_tools()).tools}
        assert "ev_echo" in names and "ev_read_resource" not in names and "ev_get_prompt" not in names, names

        resources = (await s.list_resources()).resources
        uris = [str(r.uri) for r in resources]
        assert "demo://resource/static/document/architecture.md" in uris, uris
        r = await s.read_resource("demo://resource/static/document/architecture.md")
        assert "Architecture" in r.contents[0].text, r
        templates = [t.uri_template for t in (await s.list_resource_templates()).resource_templates]
        assert "demo://resource/dynamic/text/{resourceId}" in templates, templates
        # A URI no list named, routed by its template.
        r = await s.read_resource("demo://resource/dynamic/text/3")
        assert r.contents and str(r.contents[0].uri).endswith("/3"), r

        prompts = {p.name for p in (await s.list_prompts()).prompts}
        assert {"ev_simple-prompt", "ev_args-prompt"} <= prompts, prompts
        p = await s.get_prompt("ev_args-prompt", {"city": "Lisbon", "state": "Lisboa"})
        assert "Lisbon" in json.dumps(p.model_dump(mode="json")), p
        from mcp.types import PromptReference
        c = await s.complete(PromptReference(type="ref/prompt", name="ev_completable-prompt"),
                             {"name": "department", "value": "E"})
        assert c.completion.values, c

        assert await s.set_logging_level("info") is not None
        assert await s.subscribe_resource("demo://resource/static/document/features.md") is not None
        assert await s.unsubscribe_resource("demo://resource/static/document/features.md") is not None

    asyncio.run(with_gateway(everything_config(tmp_path), body, "--events", str(events)))
    doc = json.loads(events.read_text())
    assert doc["chain"].get("verified", 0) == doc["events"]["count"] > 0, doc["chain"]
    logged = json.dumps(doc["events"]["events"])
    assert "ev_read_resource" in logged and "ev_get_prompt" in logged, logged[:2000]


def test_gateway_refuses_resource_reads_and_prompts_by_rule(tmp_path):
    """A deny rule on the read tool hides the server's resources and refuses
    a read with a JSON-RPC error naming the rule; an ask on the prompt tool
    with no approver refuses `prompts/get`. Nothing refused reaches the server."""
    from mcp.shared.exceptions import MCPError as McpError
    cfg = everything_config(tmp_path, 'deny = [{ tool = "ev_read_resource" }]\nask = [{ tool = "ev_get_prompt" }]')

    async def body(s):
        assert (await s.list_resources()).resources == []
        try:
            await s.read_resource("demo://resource/static/document/architecture.md")
            raise AssertionError("the read was not refused")
        except McpError as e:
            assert "deny" in str(e), str(e)
        assert {p.name for p in (await s.list_prompts()).prompts}, "an ask rule does not hide prompts"
        try:
            await s.get_prompt("ev_simple-prompt")
            raise AssertionError("the prompt was not refused")
        except McpError as e:
            assert "approval required" in str(e), str(e)

    asyncio.run(with_gateway(cfg, body))


TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def test_a_pypi_server_mcp_server_time_as_a_tool_source(tmp_path):
    """`mcp-server-time` from PyPI over stdio: its annotations make both
    tools `read`, so the `standard` preset runs them unasked; a call's structured content is the
    output, an `isError` result a failure, and arguments its schema rejects
    never reach it."""
    rt = car.CarRuntime()
    rt.set_permissions({"preset": "standard",
                        "mcp": {"servers": {"time": {"command": TIME_SERVER[0], "args": TIME_SERVER[1:],
                                                     "prefix": "time_"}}}})
    tools = {t["name"]: t for t in json.loads(rt.list_tools())}
    assert {"time_get_current_time", "time_convert_time"} <= set(tools), tools
    assert tools["time_get_current_time"]["source"] == "mcp"

    def run(tool, params):
        action = {"id": "a", "type": "tool_call", "tool": tool, "parameters": params}
        return json.loads(rt.execute_proposal({"id": "p", "actions": [action]}, lambda c: {}))["results"][0]

    r = run("time_get_current_time", {"timezone": "Europe/Lisbon"})
    assert r["status"] == "succeeded" and r["output"]["timezone"] == "Europe/Lisbon", r
    r = run("time_convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
    assert r["status"] == "succeeded" and r["output"]["target"]["timezone"] == "Asia/Tokyo", r
    r = run("time_get_current_time", {"timezone": "Nowhere/Land"})
    assert r["status"] == "failed" and "Invalid timezone" in r["error"], r
    r = run("time_get_current_time", {})
    assert r["status"] == "rejected" and "timezone" in r["error"], r


def test_the_gateway_in_front_of_mcp_server_time(tmp_path):
    """The gateway in front of the PyPI server: a deny rule hides and
    refuses `convert_time`; `get_current_time` passes through verbatim."""
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f"""preset = "standard"
deny = [{{ tool = "convert_time" }}]

[mcp.servers.time]
command = {json.dumps(TIME_SERVER[0])}
args = {json.dumps(TIME_SERVER[1:])}
""")

    async def body(s):
        names = {t.name for t in (await s.list_tools()).tools}
        assert names == {"get_current_time"}, names
        r = await s.call_tool("get_current_time", {"timezone": "UTC"})
        assert not r.is_error and r.structured_content["timezone"] == "UTC", r
        r = await s.call_tool("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"})
        assert r.is_error and "deny" in text(r), text(r)

    asyncio.run(with_gateway(cfg, body))


def test_binding_reads_resources_and_prompts_as_admitted_tool_calls():
    """The same `resources` / `prompts` flags in the binding's document: the
    imported `read_resource` / `get_prompt` tools are ordinary, admitted calls."""
    rt = car.CarRuntime()
    rt.set_permissions({"preset": "open", "deny": [{"tool": "ev_get_prompt"}],
                        "mcp": {"servers": {"ev": {"command": "node", "args": [str(EVERYTHING)], "prefix": "ev_",
                                                   "resources": True, "prompts": True}}}})
    tools = {t["name"]: t for t in json.loads(rt.list_tools())}
    assert tools["ev_read_resource"]["source"] == "mcp" and "ev_get_prompt" in tools

    def run(tool, params):
        action = {"id": "a", "type": "tool_call", "tool": tool, "parameters": params}
        return json.loads(rt.execute_proposal({"id": "p", "actions": [action]}, lambda c: {}))["results"][0]

    r = run("ev_read_resource", {"uri": "demo://resource/static/document/architecture.md"})
    assert r["status"] == "succeeded" and "Architecture" in r["output"], r
    r = run("ev_read_resource", {"uri": "demo://nowhere/at/all"})
    assert r["status"] == "failed" and "refused" in r["error"], r
    assert run("ev_read_resource", {})["status"] == "rejected"
    r = run("ev_get_prompt", {"name": "simple-prompt"})
    assert r["status"] == "rejected" and "deny" in r["error"], r


def test_gateway_holds_an_ask_until_car_approvals_resolve_answers_it(tmp_path):
    """`--wait-for-approvals`: the ask is held open (not refused) until it is
    answered in the store from the terminal with `car approvals resolve`;
    allow runs the call, deny refuses it; the pending ask is announced."""
    import subprocess
    cfg, _, approvals = gateway_config(tmp_path)

    def car_cli(*args):
        return subprocess.run([CAR, "approvals", *args], capture_output=True, text=True, timeout=60)

    async def answer(decision):
        for _ in range(600):
            out = car_cli("list", "--dir", str(approvals), "--json")
            assert out.returncode == 0, out.stderr
            pending = json.loads(out.stdout)["pending"]
            if pending:
                shown = car_cli("list", "--dir", str(approvals)).stdout
                assert pending[0]["key"] in shown and "up_add" in shown, shown
                done = car_cli("resolve", "--dir", str(approvals), pending[0]["key"], decision, "--reason", "test")
                assert done.returncode == 0, done.stdout + done.stderr
                again = car_cli("resolve", "--dir", str(approvals), pending[0]["key"], "allow")
                assert again.returncode == 1 and "nothing changed" in again.stdout, again.stdout
                return
            await asyncio.sleep(0.1)
        raise AssertionError("no pending approval appeared")

    async def body(s):
        call = asyncio.ensure_future(s.call_tool("up_add", {"a": 20, "b": 22}))
        await answer("allow")
        r = await call
        assert not r.is_error and r.structured_content == {"sum": 42.0}, text(r)
        call = asyncio.ensure_future(s.call_tool("up_add", {"a": 1, "b": 2}))
        await answer("deny")
        r = await call
        assert r.is_error and "denied" in text(r), text(r)

    asyncio.run(with_gateway(cfg, body, "--wait-for-approvals"))
    bad = subprocess.run([CAR, "mcp", "serve", "--config", str(everything_config(tmp_path)), "--wait-for-approvals"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "approvals_dir" in bad.stderr, bad.stderr


def test_gateway_relays_log_messages_and_resource_updates(tmp_path):
    """The upstream's `notifications/message` reach a client that set a
    level, and `notifications/resources/updated` a client subscribed to the
    URI (server-everything sends one of each at once when its toggle tools
    are called, each call admitted like any other)."""
    cfg = everything_config(tmp_path)
    logs, updates = [], []
    uri = "demo://resource/static/document/features.md"

    async def on_log(params):
        logs.append(params)

    async def on_message(message):
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(str(root.params.uri))

    async def wait_for(seen, what):
        for _ in range(150):
            if seen:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"no {what} reached the client")

    async def run():
        params = StdioServerParameters(command=CAR, args=["mcp", "serve", "--config", str(cfg)])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, logging_callback=on_log, message_handler=on_message) as s:
                await s.initialize()
                await s.set_logging_level("debug")
                r = await s.call_tool("ev_toggle-simulated-logging", {})
                assert not r.is_error, text(r)
                await wait_for(logs, "log message")
                await s.subscribe_resource(uri)
                r = await s.call_tool("ev_toggle-subscriber-updates", {})
                assert not r.is_error, text(r)
                await wait_for(updates, "resource update")
                assert updates[0] == uri, updates

    asyncio.run(run())


def resources_config(tmp_path, prompts=False):
    """The gateway in front of mcp_upstream with its resources (and prompts) on."""
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f"""
preset = "open"

[mcp.servers.t]
command = {json.dumps(UPSTREAM)}
prefix = "up_"
resources = true
prompts = {str(prompts).lower()}
env = {{ MCP_UPSTREAM_RESOURCES = "1" }}
""")
    return cfg


def test_a_subscribe_the_upstream_refuses_leaves_no_client_half_subscribed(tmp_path):
    """The upstream refuses `resources/subscribe`. Each of two clients of one
    gateway (`--http`, two MCP sessions) gets the refusal: the first client's
    failed subscribe is not kept, so the second is asked upstream again
    instead of succeeding without it."""
    import re
    import subprocess
    import time
    from mcp.client.streamable_http import streamable_http_client
    cfg = resources_config(tmp_path)
    log = tmp_path / "gateway.log"
    gw = subprocess.Popen([CAR, "mcp", "serve", "--config", str(cfg), "--http", "127.0.0.1:0"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        url = None
        for _ in range(200):
            m = re.search(r"listening on (\S+)", log.read_text())
            if m:
                url = m.group(1)
                break
            assert gw.poll() is None, log.read_text()
            time.sleep(0.05)
        assert url, log.read_text()

        async def subscribe(s):
            try:
                await s.subscribe_resource("up://nothing")
            except Exception as e:  # the SDK raises the upstream's JSON-RPC error
                return str(e)
            return None

        async def run():
            # Both sessions open at once: the first stays connected while
            # the second subscribes.
            async with streamable_http_client(url) as a, streamable_http_client(url) as b:
                async with ClientSession(a[0], a[1]) as s1, ClientSession(b[0], b[1]) as s2:
                    for s in (s1, s2):
                        init = await s.initialize()
                        assert init.capabilities.resources.subscribe is True
                    return [await subscribe(s1), await subscribe(s2)]

        first, second = asyncio.run(run())
        assert first is not None, "the first client's subscribe succeeded though the upstream refused it"
        assert second is not None, "the second client's subscribe succeeded without the upstream"
    finally:
        gw.terminate()
        gw.wait(10)


def test_prompts_and_templated_reads_do_not_list_the_upstream_each_time(tmp_path):
    """After `prompts/list` and `resources/templates/list`, the gateway knows
    which server owns a prompt and which template a URI fits: `prompts/get`
    and `resources/read` are forwarded without listing the upstream again."""
    cfg = resources_config(tmp_path, prompts=True)

    async def body(s):
        assert [p.name for p in (await s.list_prompts()).prompts] == ["up_greet"]
        templates = (await s.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["note://{id}"]
        before = int(text(await s.call_tool("up_lists", {})))
        for i in range(5):
            r = await s.get_prompt("up_greet", {"name": f"n{i}"})
            assert r.messages[0].content.text == f"hello n{i}", r
            r = await s.read_resource(f"note://{i}")
            assert r.contents[0].text == f"note {i}", r
        assert int(text(await s.call_tool("up_lists", {}))) == before
        # An unknown prompt is still looked up (and refused).
        try:
            await s.get_prompt("up_nope", {})
            raise AssertionError("an unknown prompt was served")
        except Exception as e:
            assert "unknown prompt" in str(e), e

    asyncio.run(with_gateway(cfg, body))
