#!/usr/bin/env python3
"""Load benchmark for car-server (not a test).

N concurrent connections each submit M one-tool proposals whose tool runs in
this client (a `tools.execute` callback). Reports proposals per second and
p50 / p99 submit latency, next to two round trips measured in the same run
against the same daemon: a raw WebSocket echo (Ping -> Pong, no JSON-RPC) and a
trivial JSON-RPC call (`state.exists`). Checks that nothing is lost: every
proposal answered and succeeded, every event logged.

usage: benches/server_load.py [--url ws://127.0.0.1:9100] [--token T]
                              [--connections 32] [--proposals 1000]
       With no --url it starts target/[$CARGO_BUILD_TARGET/]release/car-server
       (else debug) itself.
Target: p50 within 3x of the echo round trip.
"""

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "server"))
from client import Client  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def session(url, token):
    c = await Client.connect(url, ping_interval=None)
    await c.call("session.auth", {"token": token or ""})
    await c.call("server.handshake", {"protocol_version": 3})
    await c.call("tools.register", [{"name": "echo"}])

    def execute(params):
        return params["parameters"]

    c.handlers["tools.execute"] = execute
    return c


async def one_proposal(c, i):
    p = {"id": f"p{i}", "actions": [{"id": "a", "type": "tool_call", "tool": "echo", "parameters": {"i": i}}]}
    t0 = time.perf_counter()
    r = await c.call("proposal.submit", {"proposal": p}, timeout=120)
    dt = time.perf_counter() - t0
    ok = r["results"][0]["status"] == "succeeded" and r["results"][0]["output"] == {"i": i}
    return dt, ok


async def worker(c, n, lat, failures):
    for i in range(n):
        dt, ok = await one_proposal(c, i)
        lat.append(dt)
        if not ok:
            failures.append(i)


async def round_trips(c, n=500):
    pings, calls = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        await (await c.ws.ping())
        pings.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await c.call("state.exists", {"key": "k"})
        calls.append(time.perf_counter() - t0)
    return pings, calls


async def main(args):
    url, token, proc = args.url, args.token, None
    if not url:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        triple = os.environ.get("CARGO_BUILD_TARGET", "")
        dirs = [os.path.join(triple, p) for p in ("release", "debug")] if triple else []
        cands = [os.path.join(root, "target", d, "car-server") for d in dirs + ["release", "debug"]]
        binary = next((b for b in cands if os.path.exists(b)), None)
        if binary is None:
            sys.exit("build car-server first: cargo build --release --features server --bin car-server")
        token = "bench-token"
        log = tempfile.NamedTemporaryFile(delete=False)
        env = dict(os.environ, CAR_HOME=tempfile.mkdtemp(), CAR_AUTH_TOKEN=token)
        proc = subprocess.Popen([binary, "--port", "0"], stderr=log, env=env)
        for _ in range(200):
            m = re.search(r"listening on (ws://\S+:\d+/) ", open(log.name).read())
            if m:
                url = m.group(1)
                break
            await asyncio.sleep(0.05)
        print(f"daemon: {binary}")
    try:
        probe = await session(url, token)
        await one_proposal(probe, -1)
        per_proposal = await probe.call("events.count")
        await probe.call("events.clear")
        pings, calls = await round_trips(probe)
        await probe.call("events.clear")
        solo = []
        for i in range(300):
            solo.append((await one_proposal(probe, i))[0])

        clients = [await session(url, token) for _ in range(args.connections)]
        lat, failures = [], []
        loaded_pings = []
        done = asyncio.Event()

        async def echo_during_load():
            while not done.is_set():
                t = time.perf_counter()
                await (await probe.ws.ping())
                loaded_pings.append(time.perf_counter() - t)
                await asyncio.sleep(0.01)

        echo = asyncio.create_task(echo_during_load())
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c, args.proposals, lat, failures) for c in clients))
        wall = time.perf_counter() - t0
        done.set()
        await echo
        counts = [await c.call("events.count") for c in clients]
        for c in clients + [probe]:
            await c.close()
    finally:
        if proc:
            proc.terminate()
            proc.wait()

    total = args.connections * args.proposals
    ms = lambda s: f"{s * 1000:.3f} ms"  # noqa: E731
    report = {
        "connections": args.connections,
        "proposals_per_connection": args.proposals,
        "proposals_answered": len(lat),
        "proposals_failed": len(failures),
        "events_expected_per_connection": per_proposal * args.proposals,
        "events_logged_min": min(counts),
        "events_logged_max": max(counts),
        "wall_s": round(wall, 3),
        "proposals_per_s": round(total / wall, 1),
        "submit_p50": ms(statistics.median(lat)),
        "submit_p99": ms(pct(lat, 99)),
        "unloaded_submit_p50": ms(statistics.median(solo)),
        "unloaded_submit_p99": ms(pct(solo, 99)),
        "echo_rtt_p50": ms(statistics.median(pings)),
        "echo_rtt_under_load_p50": ms(statistics.median(loaded_pings)),
        "jsonrpc_call_rtt_p50": ms(statistics.median(calls)),
        "two_jsonrpc_calls_over_echo": round(2 * statistics.median(calls) / statistics.median(pings), 2),
        "loaded_submit_p50_over_loaded_echo_p50": round(statistics.median(lat) / statistics.median(loaded_pings), 2),
        "unloaded_submit_p50_over_echo_p50": round(statistics.median(solo) / statistics.median(pings), 2),
    }
    print(json.dumps(report, indent=2))
    lost = len(lat) != total or failures or any(c != per_proposal * args.proposals for c in counts)
    if lost:
        sys.exit("LOST: not every proposal was answered, succeeded and logged")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--token")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--proposals", type=int, default=1000)
    asyncio.run(main(ap.parse_args()))
