#!/usr/bin/env python3
"""Load benchmark for car-server (not a test).

What it measures, all in one run and through one client code path
(tests/server/client.py: a frame is sent with `json.dumps` + `ws.send`, every
reply is read by the client's reader task, `json.loads`-ed and handed to the
waiting call's future by id):

* submit: N connections (default 32) concurrently, each submitting M
  (default 1000) one-tool proposals one after another; the tool runs in this
  client (the daemon's `tools.execute` request is answered inline by the
  reader). A submit is therefore two round trips: submit -> `tools.execute`,
  answer -> result. Latency is from sending the submit to its result.
* echo: the same N connections to a raw WebSocket echo server
  (examples/ws_echo.rs: the daemon's stack, tokio + tokio-tungstenite, with no
  JSON-RPC and no task hop), each sending M JSON text frames one after
  another (shaped as responses, so the reader resolves them by id exactly as
  it resolves the daemon's results) and timing each until it is back. The
  loaded echo runs just before and just after the loaded submits; their p50
  is over both.
  With several counts (`--connections 1,8,32`) each load runs in turn on
  the same daemon, each beside its own echo over as many connections.
* unloaded: the same on one connection with nothing else running, 500
  submits and 500 echoes interleaved one by one, plus for reference the daemon's own WebSocket
  Ping -> Pong (answered inside tungstenite, and on the client side inside
  the websockets library: no JSON and no reader hop on either side) and a
  trivial JSON-RPC call (`state.exists`).

Reports proposals per second, p50 / p99 latencies and the submit p50 over the
echo p50 (loaded and unloaded). Checks that nothing is lost: every proposal
answered and succeeded, every event logged. Exits non-zero on a loss.
With `--runs N` the whole measurement is made N times, each with a fresh
daemon and echo server, and a last table gives each load's ratio run by run
and their median: on a shared virtual machine the echo's p50 moves between
runs (when a wake finds the other vCPU halted) far more than within one.

usage: benches/server_load.py [--url ws://127.0.0.1:9100] [--token T]
                              [--echo-url ws://127.0.0.1:9101]
                              [--connections 32 | 1,8,32] [--proposals 1000]
                              [--server-bin PATH] [--car-home-under DIR]
                              [--runs N]
       With no --url / --echo-url it starts
       target/[$CARGO_BUILD_TARGET/]release/car-server and
       .../release/examples/ws_echo itself (else the debug builds):
       cargo build --release --features server --bin car-server --example ws_echo
Target: submit p50 within 3x of the echo p50 measured in the same run (a
submit is two round trips, so 2x is the floor).
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


async def one_echo(c, i):
    """One round trip to the echo server, the steps of `Client.request`: a
    future under a fresh id, `json.dumps` + `ws.send`, and the reader
    resolving the future when the frame (a response with that id) is back."""
    rid = next(c.ids)
    fut = asyncio.get_running_loop().create_future()
    c.waiting[rid] = fut
    t0 = time.perf_counter()
    await c.ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"i": i}}))
    msg = await asyncio.wait_for(fut, 20)
    dt = time.perf_counter() - t0
    if msg.get("result") != {"i": i}:
        raise RuntimeError(f"echo server answered {msg!r}")
    return dt


async def echo_worker(c, n, lat):
    for i in range(n):
        lat.append(await one_echo(c, i))


async def submit_worker(c, n, lat, failures):
    for i in range(n):
        dt, ok = await one_proposal(c, i)
        lat.append(dt)
        if not ok:
            failures.append(i)


async def reference_round_trips(c, n=500):
    pings, calls = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        await (await c.ws.ping())
        pings.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await c.call("state.exists", {"key": "k"})
        calls.append(time.perf_counter() - t0)
    return pings, calls


def find_binary(rel):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    triple = os.environ.get("CARGO_BUILD_TARGET", "")
    dirs = [os.path.join(triple, p) for p in ("release", "debug")] if triple else []
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
    cands = [os.path.join(target, d, rel) for d in dirs + ["release", "debug"]]
    binary = next((b for b in cands if os.path.exists(b)), None)
    if binary is None:
        sys.exit("build first: cargo build --release --features server --bin car-server --example ws_echo")
    return binary


async def start(argv, env):
    log = tempfile.NamedTemporaryFile(delete=False)
    proc = subprocess.Popen(argv, stderr=log, env=env)
    for _ in range(200):
        m = re.search(r"listening on (ws://\S+:\d+/) ", open(log.name).read())
        if m:
            print(f"started: {argv[0]}")
            return proc, m.group(1)
        await asyncio.sleep(0.05)
    proc.kill()
    sys.exit(f"{argv[0]} did not start: {open(log.name).read()}")


async def loaded(url, token, echo_url, n, m):
    """N connections submitting M proposals each, between two halves of the
    echo over N connections of its own; the latencies and the events logged."""
    echoers = [await Client.connect(echo_url, ping_interval=None) for _ in range(n)]
    clients = [await session(url, token) for _ in range(n)]
    echo, lat, failures = [], [], []
    await asyncio.gather(*(echo_worker(c, m // 2, echo) for c in echoers))
    t0 = time.perf_counter()
    await asyncio.gather(*(submit_worker(c, m, lat, failures) for c in clients))
    wall = time.perf_counter() - t0
    await asyncio.gather(*(echo_worker(c, m - m // 2, echo) for c in echoers))
    counts = [await c.call("events.count") for c in clients]
    for c in clients + echoers:
        await c.close()
    return {"lat": lat, "echo": echo, "failures": failures, "wall": wall, "counts": counts}


async def measure(args):
    """One run: the daemon and the echo server started (unless given), the
    unloaded figures, then each load in turn; the report and whether
    anything was lost."""
    url, token, echo_url, procs = args.url, args.token, args.echo_url, []
    loads = [int(x) for x in str(args.connections).split(",")]
    try:
        if not url:
            token = "bench-token"
            home = tempfile.mkdtemp(dir=args.car_home_under)
            env = dict(os.environ, CAR_HOME=home, CAR_AUTH_TOKEN=token)
            proc, url = await start([args.server_bin or find_binary("car-server"), "--port", "0"], env)
            procs.append(proc)
        if not echo_url:
            proc, echo_url = await start([find_binary(os.path.join("examples", "ws_echo"))], dict(os.environ))
            procs.append(proc)

        probe = await session(url, token)
        await one_proposal(probe, -1)
        per_proposal = await probe.call("events.count")
        await probe.call("events.clear")
        pings, calls = await reference_round_trips(probe)
        await probe.call("events.clear")
        echo_probe = await Client.connect(echo_url, ping_interval=None)
        solo_echo, solo = [], []
        for i in range(500):  # interleaved, so both see the same conditions
            solo_echo.append(await one_echo(echo_probe, i))
            solo.append((await one_proposal(probe, i))[0])
        for c in (probe, echo_probe):
            await c.close()

        runs = {n: await loaded(url, token, echo_url, n, args.proposals) for n in loads}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()

    ms = lambda s: f"{s * 1000:.3f} ms"  # noqa: E731
    p50 = statistics.median
    report = {
        "load_average": os.getloadavg()[0],
        "proposals_per_connection": args.proposals,
        "events_per_proposal": per_proposal,
        "unloaded_submit_p50": ms(p50(solo)),
        "unloaded_submit_p99": ms(pct(solo, 99)),
        "unloaded_echo_p50": ms(p50(solo_echo)),
        "unloaded_submit_p50_over_echo_p50": round(p50(solo) / p50(solo_echo), 2),
        "reference_daemon_ping_pong_p50": ms(p50(pings)),
        "reference_jsonrpc_call_p50": ms(p50(calls)),
        "unloaded_submit_p50_over_daemon_ping_pong_p50": round(p50(solo) / p50(pings), 2),
        "loads": [],
    }
    lost = False
    for n, r in runs.items():
        lat, echo = r["lat"], r["echo"]
        report["loads"].append(
            {
                "connections": n,
                "proposals_answered": len(lat),
                "proposals_failed": len(r["failures"]),
                "events_logged_min": min(r["counts"]),
                "events_logged_max": max(r["counts"]),
                "wall_s": round(r["wall"], 3),
                "proposals_per_s": round(len(lat) / r["wall"], 1),
                "submit_p50": ms(p50(lat)),
                "submit_p99": ms(pct(lat, 99)),
                "echo_p50": ms(p50(echo)),
                "echo_p99": ms(pct(echo, 99)),
                "submit_p50_over_echo_p50": round(p50(lat) / p50(echo), 2),
            }
        )
        want = per_proposal * args.proposals
        lost = lost or len(lat) != n * args.proposals or r["failures"] or any(c != want for c in r["counts"])
    return report, bool(lost)


async def main(args):
    if args.runs < 1:
        sys.exit(f"--runs must be at least 1, got {args.runs}")
    reports, lost = [], False
    for run in range(1, args.runs + 1):
        if args.runs > 1:
            print(f"run {run} of {args.runs}", file=sys.stderr, flush=True)
        report, lost_here = await measure(args)
        reports.append(report)
        lost = lost or lost_here
        print(json.dumps(report, indent=2))
        print("| connections | proposals/s | submit p50 | submit p99 | echo p50 | echo p99 | p50 / echo |")
        print("|---|---|---|---|---|---|---|")
        for row in report["loads"]:
            print(
                f"| {row['connections']} | {row['proposals_per_s']:,} | {row['submit_p50']} | {row['submit_p99']} "
                f"| {row['echo_p50']} | {row['echo_p99']} | {row['submit_p50_over_echo_p50']}x |",
                flush=True,
            )
    if args.runs > 1:
        # Each run's ratio is of its own submits and its own echoes; the
        # machine's state moves between runs more than within one, so the
        # median over runs is the figure, with every run beside it.
        print(f"\nover {args.runs} runs, each run's submit p50 / echo p50:")
        print("| connections | median | runs over 3x | each run |")
        print("|---|---|---|---|")
        rows = [("unloaded (interleaved)", [r["unloaded_submit_p50_over_echo_p50"] for r in reports])]
        for i, row in enumerate(reports[0]["loads"]):
            rows.append((str(row["connections"]), [r["loads"][i]["submit_p50_over_echo_p50"] for r in reports]))
        for name, xs in rows:
            each = ", ".join(f"{x:.2f}" for x in xs)
            print(f"| {name} | {statistics.median(xs):.2f}x | {sum(x > 3 for x in xs)} of {len(xs)} | {each} |")
    if lost:
        sys.exit("LOST: not every proposal was answered, succeeded and logged")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--token")
    ap.add_argument("--echo-url")
    ap.add_argument("--connections", default="32", help="a count, or several: 1,8,32 (each in turn, same daemon)")
    ap.add_argument("--server-bin", help="the car-server to start (default: the one built here)")
    ap.add_argument("--car-home-under", help="make the daemon's CAR_HOME under this directory (e.g. a tmpfs)")
    ap.add_argument("--proposals", type=int, default=1000)
    ap.add_argument(
        "--runs", type=int, default=1, help="repeat the whole measurement (fresh daemon and echo each time); prints the median ratio per load"
    )
    asyncio.run(main(ap.parse_args()))
