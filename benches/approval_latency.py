"""Time from an approval to the waiting action's dispatch (issue #19).

One daemon of its own; a submitter whose admission document asks about
`echo`, and an approver. For each of N approvals: submit, wait for the
approval.requested notification, then record t0 and approve, either over
the WebSocket (`host.resolve_approval`) or through the dashboard's HTTP POST
(`/api/approval/{id}/decide`, with the session cookie and CSRF token); t1 is
when the submitter's tools.execute callback arrives. Prints p50 / p99 in ms.

With a PostgreSQL URL (issue #22), also across hosts: two daemons sharing
the store (`--store`), the submitter on A and the approver on B, so t1 - t0
is a grant on B to the waiting action's dispatch on A.

usage: CAR_SERVER_BIN=target/.../car-server python benches/approval_latency.py [N] [postgres://...]
"""

import asyncio
import json
import os
import re
import shutil
import statistics
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "server"))
# test_server reads the shared suite daemon's address at import; this bench
# starts daemons of its own.
os.environ.setdefault("CAR_SERVER_URL", "ws://127.0.0.1:0")
os.environ.setdefault("CAR_SERVER_TOKEN", "unused")
from client import Client  # noqa: E402
from test_server import Daemon  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


def dashboard_session(dash):
    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(dash + "/login", data=urllib.parse.urlencode({"token": TOKEN}).encode(), method="POST")
    try:
        opener.open(req)
    except urllib.error.HTTPError as e:
        cookie = e.headers["Set-Cookie"].split(";")[0]
    page = urllib.request.urlopen(urllib.request.Request(dash + "/", headers={"Cookie": cookie})).read().decode()
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
    return cookie, csrf


def post_decide(dash, cookie, csrf, approval_id):
    req = urllib.request.Request(
        dash + "/api/approval/" + urllib.parse.quote(approval_id, safe="") + "/decide",
        data=json.dumps({"resolution": "approve"}).encode(),
        headers={"Content-Type": "application/json", "Cookie": cookie, "X-CSRF-Token": csrf, "Origin": dash},
        method="POST")
    with urllib.request.urlopen(req) as r:
        r.read()


async def bench(d, n, via, approver_daemon=None):
    dash = re.search(r"dashboard on (http://\S+/) ", d.text()).group(1).rstrip("/")
    cookie, csrf = dashboard_session(dash)
    s = await Client.connect(d.url)
    await s.call("session.auth", {"token": TOKEN})
    await s.call("session.init", {"client_id": "bench", "admission": {"ask": [{"tool": "echo"}]}})
    await s.call("tools.register", [{"name": "echo"}])
    a = await Client.connect((approver_daemon or d).url)
    await a.call("session.auth", {"token": TOKEN})
    await a.call("server.handshake", {"protocol_version": 3})
    await a.call("host.subscribe", {})
    loop = asyncio.get_running_loop()
    dispatched = {}

    async def execute(params):
        dispatched[params["parameters"]["i"]] = time.perf_counter()
        return "ok"

    s.handlers["tools.execute"] = execute
    out = []
    for i in range(n):
        a.notifications.clear()
        fut = asyncio.create_task(s.request("proposal.submit", {"proposal": {
            "id": f"b{i}", "source": "bench",
            "actions": [{"id": "e", "type": "tool_call", "tool": "echo", "parameters": {"i": i, "via": via}}]}}))
        note = None
        while note is None:
            # Another daemon's approver sees the approval without its plan item.
            note = next((m for m in a.notifications if m["params"].get("type") == "approval.requested"
                         and m["params"]["approval"].get("proposal_id", f"b{i}") == f"b{i}"), None)
            if note is None:
                await asyncio.sleep(0.001)
        approval_id = note["params"]["approval"]["approval_id"]
        t0 = time.perf_counter()
        if via == "ws":
            await a.call("host.resolve_approval", {"approval_id": approval_id, "resolution": "approve"})
        else:
            await loop.run_in_executor(None, post_decide, dash, cookie, csrf, approval_id)
        r = await fut
        assert r["result"]["results"][0]["status"] == "succeeded", r
        out.append((dispatched[i] - t0) * 1000)
    await s.close()
    await a.close()
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def report(via, n, ms):
    print(f"{via:9s} n={n} p50={pct(ms, 50):.2f} ms p99={pct(ms, 99):.2f} ms mean={statistics.mean(ms):.2f} ms")


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    pg = sys.argv[2] if len(sys.argv) > 2 else None
    d = Daemon(env={"CAR_AUTH_TOKEN": TOKEN})
    try:
        for via in ("ws", "dashboard"):
            report(via, n, asyncio.run(bench(d, n, via)))
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)
    if pg:
        schema = f"bench_{os.getpid()}"
        env = lambda w: {"CAR_AUTH_TOKEN": TOKEN, "CAR_STORE_URL": pg, "CAR_STORE_SCHEMA": schema, "CAR_STORE_WRITER": w}
        a, b = Daemon(env=env("a")), Daemon(env=env("b"))
        try:
            report("ws, A->B", n, asyncio.run(bench(a, n, "ws", approver_daemon=b)))
        finally:
            for x in (a, b):
                x.__exit__(None, None, None)
                shutil.rmtree(x.home, ignore_errors=True)
            import subprocess
            subprocess.run(["psql", pg, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], check=False)


if __name__ == "__main__":
    main()
