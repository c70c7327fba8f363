#!/usr/bin/env python3
"""Two or more car-server builds or settings side by side (not a test).

Starts each daemon given (a binary, optionally with environment variables
of its own) and the raw WebSocket echo server, opens one connection to
each, and runs rounds: in every round each daemon gets K one-tool submits
in turn (the order rotates from round to round), then the echo gets K
round trips. The client and the submit are those of benches/server_load.py.
A drift of the machine's speed (another tenant, a build) falls on every
daemon alike, so the per-round ratio of one daemon's p50 to the first's is
what to read; its median over the rounds is printed with its range.

    benches/server_ab.py [--rounds 20] [--per-round 150] [--car-home-under DIR]
                         [--echo-bin PATH] SERVER [SERVER ...]

SERVER: a car-server binary, or `NAME=VALUE[,NAME=VALUE...]@BINARY` to
start it with those environment variables (for example
`TOKIO_WORKER_THREADS=1@target/.../release/car-server`). --echo-bin
defaults to the ws_echo example of this checkout's release build:
cargo build --release --features server --bin car-server --example ws_echo
"""

import argparse
import asyncio
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "server"))
sys.path.insert(0, os.path.dirname(__file__))
from client import Client  # noqa: E402
import server_load  # noqa: E402


def parse_server(spec):
    """(binary, environment additions) of a SERVER argument."""
    if "@" not in spec or os.path.isfile(spec):
        return spec, {}
    settings, binary = spec.split("@", 1)
    extra = {}
    for kv in settings.split(","):
        name, sep, value = kv.partition("=")
        if not sep or not name:
            sys.exit(f"server `{spec}`: `{kv}` is not NAME=VALUE")
        extra[name] = value
    return binary, extra


async def main(args):
    servers = [parse_server(s) for s in args.servers]
    for binary, _ in servers:
        if not os.path.isfile(binary):
            sys.exit(f"no car-server at `{binary}`")
    echo_bin = args.echo_bin or server_load.find_binary(os.path.join("examples", "ws_echo"))
    procs, conns = [], []
    try:
        for binary, extra in servers:
            home = tempfile.mkdtemp(dir=args.car_home_under)
            env = dict(os.environ, CAR_HOME=home, CAR_AUTH_TOKEN="bench-token", **extra)
            proc, url = await server_load.start([binary, "--port", "0"], env)
            procs.append(proc)
            conns.append(await server_load.session(url, "bench-token"))
        proc, echo_url = await server_load.start([echo_bin], dict(os.environ))
        procs.append(proc)
        echo = await Client.connect(echo_url, ping_interval=None)

        k, n = args.per_round, len(conns)
        lat, echoes, i = [[] for _ in conns], [], 0
        for c in conns:  # warm every daemon up before the first round
            for _ in range(50):
                i += 1
                await server_load.one_proposal(c, i)
        for r in range(args.rounds):
            for j in [(r + d) % n for d in range(n)]:
                for _ in range(k):
                    i += 1
                    dt, ok = await server_load.one_proposal(conns[j], i)
                    if not ok:
                        sys.exit(f"{args.servers[j]}: proposal p{i} did not succeed")
                    lat[j].append(dt)
            for _ in range(k):
                i += 1
                echoes.append(await server_load.one_echo(echo, i))
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, end="\r")
        print(file=sys.stderr)
        for c in conns + [echo]:
            await c.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()

    echo_p50 = statistics.median(echoes)
    print(f"echo: p50 {echo_p50 * 1e6:.1f} us")
    for spec, xs in zip(args.servers, lat):
        p50 = statistics.median(xs)
        print(f"{spec}: p50 {p50 * 1e6:.1f} us, {p50 / echo_p50:.2f}x the echo")
    for j in range(1, n):
        per_round = [
            statistics.median(lat[j][r * k : (r + 1) * k]) / statistics.median(lat[0][r * k : (r + 1) * k])
            for r in range(args.rounds)
        ]
        print(
            f"{args.servers[j]} / {args.servers[0]}: per-round p50 ratio median {statistics.median(per_round):.3f}"
            f" (range {min(per_round):.3f}-{max(per_round):.3f})"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("servers", nargs="+", metavar="SERVER")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=150, help="submits per daemon and echoes per round")
    ap.add_argument("--car-home-under", help="make each daemon's CAR_HOME under this directory (e.g. /dev/shm)")
    ap.add_argument("--echo-bin", help="the ws_echo binary (default: the one built here)")
    a = ap.parse_args()
    if a.rounds < 1 or a.per_round < 1:
        ap.error("--rounds and --per-round must be at least 1")
    asyncio.run(main(a))
