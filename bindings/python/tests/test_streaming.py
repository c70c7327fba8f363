"""Detached (streaming / long-running) Python tools: a generator, an async
generator or a plain answer, read into the handle `tool_poll` drains;
`tool_cancel` closes the generator; failures end the stream with an error."""
import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import car_runtime


def runtime(*tools):
    rt = car_runtime.CarRuntime()
    for t in tools:
        rt.register_tool(t)
    return rt


def detached(tool, mode="streaming", **kw):
    a = {"id": "s", "type": "tool_call", "tool": tool, "invocation_mode": mode}
    a.update(kw)
    return {"actions": [a, {"id": "after", "type": "tool_call", "tool": "plain", "dependencies": ["s"]}]}


def handle_of(out):
    out = json.loads(out) if isinstance(out, str) else out
    first = out["results"][0]
    assert first["status"] == "succeeded" and first["output"]["status"] == "running", out
    assert out["results"][1]["status"] == "succeeded", "the DAG went on"
    return first["output"]["tool_handle"]


def drain(rt, handle, timeout=10):
    """Every chunk polled until the terminal status, and that last poll."""
    chunks, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        r = json.loads(rt.tool_poll(handle))
        chunks += r["chunks"]
        if r["status"] != "running":
            assert rt.tool_poll(handle) is None, "consumed after its terminal status"
            return chunks, r
        time.sleep(0.01)
    raise AssertionError(f"still running: {chunks}")


def test_a_generator_tool_streams_its_items_and_returns_the_result():
    calls = []

    def tool(call_json):
        call = json.loads(call_json)
        calls.append(call)
        if call["tool"] == "plain":
            return "ok"

        def gen():
            yield "a"
            yield {"kind": "progress", "fraction": 0.5, "message": "half"}
            yield {"rows": [1, 2]}
            return {"n": 3}

        return gen()

    rt = runtime("feed", "plain")
    handle = handle_of(rt.execute_proposal(detached("feed", parameters={"q": 1}), tool))
    chunks, last = drain(rt, handle)
    assert chunks == [{"kind": "text", "text": "a"}, {"kind": "progress", "fraction": 0.5, "message": "half"},
                      {"kind": "data", "data": {"rows": [1, 2]}}, {"kind": "done", "result": {"n": 3}}]
    assert last["status"] == "succeeded" and last["result"] == {"n": 3} and last["action_id"] == "s"
    feed = [c for c in calls if c["tool"] == "feed"][0]
    assert feed["detached"] is True and feed["params"] == {"q": 1}
    assert "detached" not in [c for c in calls if c["tool"] == "plain"][0]


def test_an_async_generator_tool_streams_under_the_sync_and_the_async_call():
    def tool(call_json):
        if json.loads(call_json)["tool"] == "plain":
            return "ok"

        async def agen():
            for i in range(3):
                await asyncio.sleep(0.001)
                yield {"i": i}

        return agen()

    rt = runtime("feed", "plain")
    want = [{"kind": "data", "data": {"i": i}} for i in range(3)] + [{"kind": "done"}]
    chunks, last = drain(rt, handle_of(rt.execute_proposal(detached("feed"), tool)))
    assert chunks == want and last["status"] == "succeeded"

    async def main():
        out = await rt.execute_proposal_async(detached("feed"), tool)
        handle = handle_of(out)
        # The loop runs the async generator: poll from the loop without blocking it.
        for _ in range(500):
            r = json.loads(rt.tool_poll(handle))
            if r["status"] != "running":
                return r
            await asyncio.sleep(0.01)
        raise AssertionError("still running")

    assert asyncio.run(main())["status"] == "succeeded"


def test_cancelling_closes_the_generator_and_reads_cancelled():
    closed = threading.Event()
    yielded = threading.Event()

    def tool(call_json):
        if json.loads(call_json)["tool"] == "plain":
            return "ok"

        def forever():
            try:
                while True:
                    yield "tick"
                    yielded.set()
                    time.sleep(0.01)
            finally:
                closed.set()

        return forever()

    rt = runtime("tail", "plain")
    handle = handle_of(rt.execute_proposal(detached("tail", "long_running"), tool))
    assert yielded.wait(5)
    assert rt.tool_cancel(handle) is True
    assert closed.wait(5), "the generator was closed (its finally ran)"
    _, last = drain(rt, handle)
    assert last["status"] == "cancelled", last


def test_failures_end_the_stream_or_fail_the_start():
    def tool(call_json):
        call = json.loads(call_json)
        if call["tool"] == "plain":
            return "ok"
        if call["tool"] == "refuses":
            raise RuntimeError("cannot start")
        if call["tool"] == "whole":
            return {"all": "at once"}
        if call["tool"] == "bad":
            return iter([{"kind": "bogus"}])

        def breaks():
            yield "one"
            raise ValueError("broke midway")

        return breaks()

    rt = runtime("breaks", "refuses", "whole", "bad", "plain")
    chunks, last = drain(rt, handle_of(rt.execute_proposal(detached("breaks"), tool)))
    assert chunks == [{"kind": "text", "text": "one"}, {"kind": "error", "message": "ValueError: broke midway"}]
    assert last["status"] == "failed" and "broke midway" in last["error"], last
    # A plain answer is the whole result: one done chunk.
    chunks, last = drain(rt, handle_of(rt.execute_proposal(detached("whole"), tool)))
    assert chunks == [{"kind": "done", "result": {"all": "at once"}}] and last["result"] == {"all": "at once"}
    # An item that claims to be a chunk but is not one ends the stream, named.
    chunks, last = drain(rt, handle_of(rt.execute_proposal(detached("bad"), tool)))
    assert last["status"] == "failed" and "not a stream chunk" in last["error"], last
    # An exception from the call itself fails the action.
    out = json.loads(rt.execute_proposal(detached("refuses", failure_behavior="skip"), tool))
    assert out["results"][0]["status"] == "skipped" and "cannot start" in out["results"][0]["error"], out


_CAP_SCRIPT = r"""
import json, threading, time
import car_runtime

release = threading.Event()
started = []

def tool(call_json):
    call = json.loads(call_json)
    def gen():
        started.append(call["action_id"])
        release.wait(20)
        yield "done"
    return gen()

rt = car_runtime.CarRuntime()
rt.register_tool("feed")

def run(ids):
    p = {"actions": [{"id": i, "type": "tool_call", "tool": "feed", "invocation_mode": "streaming",
                      "max_retries": 0} for i in ids]}
    return {r["action_id"]: r for r in json.loads(rt.execute_proposal(p, tool))["results"]}

first = run(["a", "b", "c"])
statuses = sorted(r["status"] for r in first.values())
refused = [r for r in first.values() if r["status"] == "failed"]
release.set()
handles = [r["output"]["tool_handle"] for r in first.values() if r["status"] == "succeeded"]
for h in handles:
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if json.loads(rt.tool_poll(h))["status"] != "running":
            break
        time.sleep(0.01)
# The threads give their places back as they end (just after their
# streams close, so a start may need a moment).
for attempt in range(100):
    again = run(["d", "e"])
    if all(r["status"] == "succeeded" for r in again.values()):
        break
    time.sleep(0.05)
print(json.dumps({"statuses": statuses, "error": refused[0]["error"] if refused else None,
                  "again": sorted(r["status"] for r in again.values())}))
"""


def test_detached_tools_running_at_once_are_capped():
    """Each running detached Python tool holds an OS thread: past
    CAR_MAX_DETACHED_TOOLS (default 256) a start is refused with a clear
    error instead of growing threads without bound; places come back as
    tools end. Run in a child process, since the cap is read once."""
    env = dict(os.environ, CAR_MAX_DETACHED_TOOLS="2")
    out = subprocess.run([sys.executable, "-c", _CAP_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["statuses"] == ["failed", "succeeded", "succeeded"], r
    assert "2 detached Python tools are already running" in r["error"], r
    assert "CAR_MAX_DETACHED_TOOLS" in r["error"], r
    assert r["again"] == ["succeeded", "succeeded"], r
