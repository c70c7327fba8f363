#!/usr/bin/env python3
"""The official MCP conformance suite (`@modelcontextprotocol/conformance`,
installed in tests/mcp by `npm ci`) against our MCP servers over streamable HTTP.

Three targets, one run each of the suite's active server scenarios:

- `direct`:   `@modelcontextprotocol/server-everything` over streamable HTTP;
- `gateway`:  `car mcp serve --http` in front of server-everything (stdio),
              preset `open` (the differential: the gateway must pass every
              scenario the direct run passes, but those in NOT_FORWARDED);
- `endpoint`: the daemon's MCP endpoint (`car-server`, `POST /mcp`).

Prints one line per target and scenario (`pass` / `FAIL`) and a Markdown
table (`--markdown FILE`). Exits 1 when a scenario listed in EXPECTED fails,
or when the gateway fails a scenario the direct run passes (NOT_FORWARDED aside).

usage: scripts/mcp-conformance.py [--car BIN] [--car-server BIN] [--markdown FILE]
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = ROOT / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol"
SUITE = MODULES / "conformance" / "dist" / "index.js"
EVERYTHING = MODULES / "server-everything" / "dist" / "index.js"
DEBUG = ROOT / "target" / os.environ.get("CARGO_BUILD_TARGET", "x86_64-unknown-linux-gnu") / "debug"

# What each target must pass (scenarios outside these lists are recorded,
# with the reason in docs/mcp.md).
EXPECTED = {
    "gateway": ["server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "logging-set-level",
                "resources-list", "resources-subscribe", "resources-unsubscribe", "prompts-list"],
    "endpoint": ["server-initialize", "ping", "tools-list"],
}

# The suite's client scenarios run against the tool-source client, and the
# ones it must pass.
CLIENT_SCENARIOS = ["initialize", "tools_call"]
CLIENT_MUST_PASS = ["initialize", "tools_call"]

# Scenarios server-everything passes directly that the gateway does not,
# each with its reason (anything else passing directly must pass through
# the gateway).
NOT_FORWARDED = {
    "tools-call-simple-text": "server-everything has no `test_simple_text`; it answers the unknown tool with an "
                              "isError result the check accepts, the gateway with JSON-RPC -32602",
    "tools-call-error": "server-everything has no `test_error_handling`; as tools-call-simple-text",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} is not listening on {port}")


def wait_line(log, marker, proc, what):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited: {log.read_text()}")
        for line in log.read_text().splitlines():
            if marker in line:
                return line.split(marker, 1)[1].split()[0]
        time.sleep(0.1)
    raise SystemExit(f"{what}: no `{marker}` line: {log.read_text()}")


def run_suite(url, work):
    """{scenario: (passed, failed)} from the suite's summary."""
    out = subprocess.run(["node", str(SUITE), "server", "--url", url], cwd=work,
                         capture_output=True, text=True, timeout=1200)
    results = {}
    for line in out.stdout.splitlines() + out.stderr.splitlines():
        m = re.match(r"^[✓✗] (\S+): (\d+) passed, (\d+) failed", line.strip())
        if m:
            results[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    if not results:
        raise SystemExit(f"no results from the suite against {url}:\n{out.stdout}\n{out.stderr}")
    return results


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--car", default=str(DEBUG / "car"))
    ap.add_argument("--car-server", default=str(DEBUG / "car-server"))
    ap.add_argument("--markdown")
    a = ap.parse_args()
    for p in (SUITE, EVERYTHING, pathlib.Path(a.car), pathlib.Path(a.car_server)):
        if not p.exists():
            raise SystemExit(f"{p} is missing (npm ci in tests/mcp; cargo build --all-features --bins)")
    work = pathlib.Path(tempfile.mkdtemp(prefix="mcp-conformance-"))
    procs = []
    results = {}
    try:
        port = free_port()
        ev = subprocess.Popen(["node", str(EVERYTHING), "streamableHttp"], env=dict(os.environ, PORT=str(port)),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(ev)
        wait_port(port, ev, "server-everything")
        results["direct"] = run_suite(f"http://127.0.0.1:{port}/mcp", work)
        stop(ev)

        cfg = work / "gateway.toml"
        cfg.write_text('preset = "open"\n\n[mcp.servers.everything]\n'
                       f'command = "node"\nargs = [{json.dumps(str(EVERYTHING))}, "stdio"]\n'
                       'resources = true\nprompts = true\n')
        log = work / "gateway.log"
        gw = subprocess.Popen([a.car, "mcp", "serve", "--config", str(cfg), "--http", "127.0.0.1:0"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        procs.append(gw)
        results["gateway"] = run_suite(wait_line(log, "listening on ", gw, "car mcp serve"), work)
        stop(gw)

        home = work / "home"
        home.mkdir()
        log = work / "daemon.log"
        d = subprocess.Popen([a.car_server, "--port", "0", "--no-auth"], env=dict(os.environ, CAR_HOME=str(home)),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        procs.append(d)
        results["endpoint"] = run_suite(wait_line(log, "MCP endpoint on ", d, "car-server"), work)
        stop(d)
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(work, ignore_errors=True)

    # Client scenarios: our tool-source client (tests/mcp/conformance_client.py,
    # through the Python binding) against the suite's own servers.
    client = [sys.executable, str(ROOT / "tests" / "mcp" / "conformance_client.py")]
    client_results = {}
    for sc in CLIENT_SCENARIOS:
        work = pathlib.Path(tempfile.mkdtemp(prefix="mcp-conformance-client-"))
        try:
            out = subprocess.run(["node", str(SUITE), "client", "--command", " ".join(client), "--scenario", sc],
                                 cwd=work, capture_output=True, text=True, timeout=600)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        m = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", out.stdout + out.stderr)
        client_results[sc] = bool(m) and m.group(3) == "0" and int(m.group(1)) > 0
        print(f"client {sc:33} {'pass' if client_results[sc] else 'fail'}")

    scenarios = list(results["direct"])
    for extra in (s for t in results.values() for s in t if s not in scenarios):
        scenarios.append(extra)
    ok = lambda t, s: s in results[t] and results[t][s][1] == 0 and results[t][s][0] > 0
    bad = []
    for t, must in EXPECTED.items():
        bad += [f"{t}: {s} fails" for s in must if not ok(t, s)]
    bad += [f"gateway: {s} passes directly but not through the gateway" for s in scenarios
            if ok("direct", s) and not ok("gateway", s) and s not in NOT_FORWARDED]
    rows = ["| scenario | server-everything direct | through the gateway | daemon endpoint |", "|---|---|---|---|"]
    for s in scenarios:
        cell = lambda t: ("pass" if ok(t, s) else "fail") if s in results[t] else "-"
        rows.append(f"| {s} | {cell('direct')} | {cell('gateway')} | {cell('endpoint')} |")
        print(f"{s:40} direct={cell('direct'):5} gateway={cell('gateway'):5} endpoint={cell('endpoint')}")
    bad += [f"client: {s} fails" for s in CLIENT_MUST_PASS if not client_results.get(s)]
    rows += ["", "| client scenario (the tool-source client) | result |", "|---|---|"]
    rows += [f"| {s} | {'pass' if ok_ else 'fail'} |" for s, ok_ in client_results.items()]
    totals = {t: sum(1 for s in r if ok(t, s)) for t, r in results.items()}
    print("scenarios passed: " + ", ".join(f"{t} {n} of {len(results[t])}" for t, n in totals.items()))
    if a.markdown:
        pathlib.Path(a.markdown).write_text("\n".join(rows) + "\n")
    if bad:
        print("conformance regressions:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
