"""Issue #23: detached (streaming / long-running) client tools over the daemon.

An action with `invocation_mode: "streaming"` or `"long_running"` starts its
client tool with `tools.execute {..., detached: true}`. The client answers
`{"stream": true}` and pushes chunks with `tools.stream.push {request_id,
chunk | chunks}`; the action succeeds at once with `{tool_handle, status:
"running"}` and the chunks are read with `tools.poll` or as
`tools.stream.event` notifications. `tools.cancel {handle}` stops it: the
client gets `tools.cancel {request_id, action_id, reason}` and later pushes
are refused (`stream_not_open`).
"""

import asyncio

from client import ToolError
from test_server import URL, authed, proposal, run, tool_call


async def streaming_client(plan):
    """A session serving `feed` and `forever`: a detached call is answered
    `{"stream": true}` and then `plan(c, params)` pushes its chunks."""
    c = await authed(URL)
    await c.call("session.init", {"client_id": "stream-test"})
    await c.call("tools.register", [{"name": "feed"}, {"name": "forever"}, {"name": "plain"}])
    c.calls = []
    c.plans = []

    async def execute(params):
        c.calls.append(params)
        if params["tool"] == "plain" or not params.get("detached"):
            return {"whole": params["parameters"]}
        c.plans.append(asyncio.create_task(plan(c, params)))
        return {"stream": True}

    c.handlers["tools.execute"] = execute
    return c


async def poll_until_done(c, handle, timeout=10):
    """Every chunk polled until the handle's terminal status, and that poll."""
    chunks = []
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        r = await c.call("tools.poll", {"handle": handle})
        assert r is not None, "consumed before its terminal status was seen"
        chunks += r["chunks"]
        if r["status"] != "running":
            return chunks, r
        await asyncio.sleep(0.02)
    raise AssertionError(f"{handle} still running; chunks so far {chunks}")


def test_a_streaming_client_tool_pushes_its_chunks_to_poll_and_to_subscribers():
    sent = [{"kind": "text", "text": "a"}, {"kind": "progress", "fraction": 0.5, "message": "half"},
            {"kind": "data", "data": {"rows": [1, 2]}}]

    async def plan(c, params):
        await c.call("tools.stream.push", {"request_id": params["request_id"], "chunk": sent[0]})
        # An open stream logs like a call in flight.
        assert (await c.call("tools.log", {"request_id": params["request_id"], "level": "debug",
                                           "message": "streaming"})) == {"logged": True}
        r = await c.call("tools.stream.push", {"request_id": params["request_id"],
                                               "chunks": sent[1:] + [{"kind": "done", "result": {"n": 3}}]})
        assert r == {"accepted": 3}
        # The stream ended with `done`: nothing more is taken.
        r = await c.request("tools.stream.push", {"request_id": params["request_id"], "chunk": sent[0]})
        assert r["error"]["data"]["code"] == "stream_not_open", r
        r = await c.request("tools.log", {"request_id": params["request_id"], "level": "info", "message": "late"})
        assert r["error"]["data"]["code"] == "call_not_in_flight", r

    async def go():
        c = await streaming_client(plan)
        assert (await c.call("tools.stream.subscribe", {})) == {"subscribed": True}
        res = await c.call("proposal.submit", {"proposal": proposal(
            [tool_call("s", "feed", parameters={"q": 1}, invocation_mode="streaming"),
             tool_call("after", "plain", dependencies=["s"])], "stream-1")})
        out = res["results"][0]
        assert out["status"] == "succeeded" and out["output"]["status"] == "running", res
        assert res["results"][1]["status"] == "succeeded", "the DAG went on without waiting"
        handle = out["output"]["tool_handle"]
        [call] = [p for p in c.calls if p["tool"] == "feed"]
        assert call["detached"] is True and call["action_id"] == "s" and call["parameters"] == {"q": 1}
        assert not any(p.get("detached") for p in c.calls if p["tool"] == "plain")
        chunks, last = await poll_until_done(c, handle)
        assert chunks == sent + [{"kind": "done", "result": {"n": 3}}]
        assert last["status"] == "succeeded" and last["result"] == {"n": 3} and last["action_id"] == "s", last
        assert await c.call("tools.poll", {"handle": handle}) is None, "consumed after its terminal status"
        # The same chunks as notifications, tagged with the handle.
        for _ in range(100):
            events = [n["params"] for n in c.notifications if n["method"] == "tools.stream.event"]
            if len(events) == 4:
                break
            await asyncio.sleep(0.02)
        assert [e["chunk"] for e in events] == sent + [{"kind": "done", "result": {"n": 3}}]
        assert {e["handle"]["id"] if isinstance(e["handle"], dict) else e["handle"] for e in events} == {handle}
        await asyncio.gather(*c.plans)  # the plan's own assertions held
        await c.close()

    run(go())


def test_cancelling_a_long_running_client_tool_tells_the_client_and_closes_its_stream():
    async def plan(c, params):
        await c.call("tools.stream.push", {"request_id": params["request_id"],
                                           "chunk": {"kind": "text", "text": "working"}})
        c.started.set()

    async def go():
        c = await streaming_client(plan)
        c.started = asyncio.Event()
        res = await c.call("proposal.submit", {"proposal": proposal(
            [tool_call("f", "forever", invocation_mode="long_running")], "stream-2")})
        handle = res["results"][0]["output"]["tool_handle"]
        await asyncio.wait_for(c.started.wait(), 5)
        [call] = [p for p in c.calls if p["tool"] == "forever"]
        # A chunk that is not one is refused, naming it, and nothing is taken.
        r = await c.request("tools.stream.push", {"request_id": call["request_id"],
                                                  "chunks": [{"kind": "text", "text": "ok"}, {"kind": "bogus"}]})
        assert r["error"]["code"] == -32602 and "chunks[1]" in r["error"]["message"], r
        first = await c.call("tools.poll", {"handle": handle})
        assert first["status"] == "running" and first["chunks"] == [{"kind": "text", "text": "working"}], first
        # Another connection cannot push into this one's stream.
        other = await authed(URL)
        r = await other.request("tools.stream.push", {"request_id": call["request_id"],
                                                      "chunk": {"kind": "done"}})
        assert r["error"]["data"]["code"] == "stream_not_open", r
        await other.close()
        assert await c.call("tools.cancel", {"handle": handle}) == {"cancelled": True}
        for _ in range(100):
            notes = [n["params"] for n in c.notifications if n["method"] == "tools.cancel"]
            if notes:
                break
            await asyncio.sleep(0.02)
        assert notes and notes[0]["request_id"] == call["request_id"] and notes[0]["action_id"] == "f", notes
        assert "cancelled" in notes[0]["reason"]
        r = await c.request("tools.stream.push", {"request_id": call["request_id"],
                                                  "chunk": {"kind": "text", "text": "late"}})
        assert r["error"]["data"]["code"] == "stream_not_open", r
        chunks, last = await poll_until_done(c, handle)
        assert last["status"] == "cancelled" and "late" not in str(chunks), last
        await asyncio.gather(*c.plans)
        await c.close()

    run(go())


def test_a_detached_call_answered_with_a_plain_result_is_one_done_chunk():
    async def go():
        c = await streaming_client(None)
        # `plain` answers with its whole result even when detached.
        res = await c.call("proposal.submit", {"proposal": proposal(
            [tool_call("p", "plain", parameters={"k": "v"}, invocation_mode="streaming")], "stream-3")})
        handle = res["results"][0]["output"]["tool_handle"]
        chunks, last = await poll_until_done(c, handle)
        assert chunks == [{"kind": "done", "result": {"whole": {"k": "v"}}}], chunks
        assert last["status"] == "succeeded" and last["result"] == {"whole": {"k": "v"}}
        # A push needs exactly one of `chunk` and `chunks`.
        for bad in [{"request_id": "x"}, {"request_id": "x", "chunk": {"kind": "done"}, "chunks": []}]:
            r = await c.request("tools.stream.push", bad)
            assert r["error"]["code"] == -32602, r
        await c.close()

    run(go())


def test_a_detached_start_the_client_refuses_fails_the_action():
    async def go():
        c = await authed(URL)
        await c.call("session.init", {"client_id": "stream-refuse"})
        await c.call("tools.register", [{"name": "feed"}])

        async def execute(params):
            raise ToolError("no streams here")

        c.handlers["tools.execute"] = execute
        res = await c.call("proposal.submit", {"proposal": proposal(
            [tool_call("s", "feed", invocation_mode="streaming")], "stream-4")})
        r = res["results"][0]
        assert r["status"] == "failed" and "no streams here" in r["error"], r
        await c.close()

    run(go())
