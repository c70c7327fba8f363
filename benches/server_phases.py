#!/usr/bin/env python3
"""Where a `proposal.submit` spends its time, seen from one client (not a test).

One connection to a running car-server, N one-tool proposals one after
another, each split at the tool call: `to_tool_call` is from sending the
submit to receiving the daemon's `tools.execute` (the parse, admission and
the engine up to the dispatch), `tool_result_to_answer` from sending the
tool's result to receiving the proposal's result (the engine's end, the
events made durable, the answer). After each submit a trivial call
(`state.exists`) for the cost of one JSON-RPC round trip, and with an echo
URL the same number of raw WebSocket round trips to examples/ws_echo.

usage: benches/server_phases.py URL TOKEN [N] [ECHO_URL]
       (start them first: CAR_AUTH_TOKEN=T car-server --port P; ws_echo)
Prints p50 and p10 of each. Pair it with `perf stat -p <daemon pid>` for
the daemon's CPU time and context switches per submit.
"""
import asyncio
import json
import statistics
import sys
import time

import websockets

URL = sys.argv[1]
TOKEN = sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
ECHO = sys.argv[4] if len(sys.argv) > 4 else None


async def call(ws, i, method, params):
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}))
    return json.loads(await ws.recv())


async def main():
    async with websockets.connect(URL, ping_interval=None, max_size=None) as ws:
        await call(ws, 1, "session.auth", {"token": TOKEN})
        await call(ws, 2, "server.handshake", {"protocol_version": 3})
        await call(ws, 3, "tools.register", [{"name": "echo"}])
        t1s, t2s, tots, trivial = [], [], [], []
        for i in range(N):
            p = {"id": f"p{i}", "actions": [{"id": "a", "type": "tool_call", "tool": "echo", "parameters": {"i": i}}]}
            t0 = time.perf_counter()
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 100 + i, "method": "proposal.submit", "params": {"proposal": p}}))
            m = json.loads(await ws.recv())
            t1 = time.perf_counter()
            assert m.get("method") == "tools.execute", m
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": m["params"]["parameters"]}))
            r = json.loads(await ws.recv())
            t2 = time.perf_counter()
            assert r["result"]["results"][0]["status"] == "succeeded", r
            t1s.append(t1 - t0)
            t2s.append(t2 - t1)
            tots.append(t2 - t0)
            t0 = time.perf_counter()
            await call(ws, 10**7 + i, "state.exists", {"key": "k"})
            trivial.append(time.perf_counter() - t0)
    out = {"to_tool_call": t1s, "tool_result_to_answer": t2s, "submit": tots, "state.exists": trivial}
    if ECHO:
        async with websockets.connect(ECHO, ping_interval=None) as e:
            ech = []
            for i in range(N):
                t0 = time.perf_counter()
                await e.send(json.dumps({"jsonrpc": "2.0", "id": i, "result": {"i": i}}))
                json.loads(await e.recv())
                ech.append(time.perf_counter() - t0)
            out["echo"] = ech
    for k, v in out.items():
        v = sorted(v)
        print(f"{k:24s} p50 {statistics.median(v)*1e6:7.1f} us  p10 {v[len(v)//10]*1e6:7.1f} us")


asyncio.run(main())
