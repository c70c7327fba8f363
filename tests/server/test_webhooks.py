"""Issue #19: approval webhooks.

A receiver on loopback (a real HTTP server in a thread) gets the daemon's
`approval.requested` and `approval.resolved` POSTs, checks the HMAC
signature the way a receiver would, and answers its first request 503 so the
retry is seen: same delivery, the next attempt, signed again. With a webhook
configured and nobody subscribed on the WebSocket, an ask waits for an
approver instead of being refused at once. Bad configurations refuse to
start, naming the input.
"""

import asyncio
import hashlib
import hmac
import http.server
import json
import shutil
import subprocess
import threading
import time

import pytest

from test_server import BIN, Daemon, proposal, run, tool_call
from test_approvals import ASK_ECHO, OP, connect, submitter

SECRET = "webhook-secret-0123456789"


class Receiver:
    """Records every POST; answers the first `fail_first` with 503."""

    def __init__(self, fail_first=1):
        self.requests = []
        self.fail_first = fail_first
        me = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                me.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                    "body": body})
                status = 503 if len(me.requests) <= me.fail_first else 204
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/car"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n, timeout=20):
        end = time.time() + timeout
        while time.time() < end and len(self.requests) < n:
            time.sleep(0.02)
        assert len(self.requests) >= n, self.requests
        return self.requests

    def close(self):
        self.server.shutdown()


def verified(req, secret=SECRET):
    """The body as JSON, once its signature checks."""
    h = req["headers"]
    mac = hmac.new(secret.encode(), h["x-car-timestamp"].encode() + b"." + req["body"], hashlib.sha256).hexdigest()
    assert hmac.compare_digest(h["x-car-signature"], "sha256=" + mac), h
    assert abs(int(h["x-car-timestamp"]) - time.time()) < 120
    assert h["content-type"] == "application/json"
    return json.loads(req["body"])


def test_approval_events_are_posted_signed_and_retried_and_an_ask_waits_for_the_people_they_reach():
    rx = Receiver(fail_first=1)
    # `--dashboard 0`: a free port for the dashboard the approval link names
    # (its default, the WebSocket port + 1, may be taken, and then no link).
    d = Daemon("--webhook", rx.url, "--dashboard", "0", env={"CAR_AUTH_TOKEN": OP, "CAR_WEBHOOK_SECRET": SECRET,
                                         "CAR_WEBHOOK_BACKOFF_MS": "50"})
    try:
        async def go():
            # Nobody is subscribed on the WebSocket: the webhook is the approver.
            s = await submitter(d.url)
            pending = asyncio.create_task(
                s.request("proposal.submit", {"proposal": proposal([tool_call("e1", "echo", parameters={"m": 1})], "wh-1")}))
            # The first attempt is answered 503, the second delivers.
            await asyncio.get_running_loop().run_in_executor(None, rx.wait, 2)
            first, second = rx.requests[0], rx.requests[1]
            assert first["path"] == "/hooks/car"
            a, b = verified(first), verified(second)
            assert first["headers"]["x-car-delivery"] == second["headers"]["x-car-delivery"] == a["delivery_id"]
            assert (first["headers"]["x-car-attempt"], second["headers"]["x-car-attempt"]) == ("1", "2")
            assert first["headers"]["x-car-event"] == "approval.requested" == b["type"]
            item = b["approval"]
            assert item["tool"] == "echo" and item["action_id"] == "e1" and item["status"] == "pending"
            assert item["proposal_id"] == "wh-1" and item["parameters"] == {"m": 1}
            assert b["approval_url"].startswith("http://127.0.0.1:") and b["approval_url"].endswith(
                "/approval/" + item["approval_id"].replace(":", "%3A")), b
            assert not pending.done(), "the ask waits for someone the webhook reached"
            # Someone it reached approves (here over the WebSocket).
            op = await connect(d.url)
            await op.call("host.resolve_approval", {"approval_id": item["approval_id"], "resolution": "approve"})
            res = (await pending)["result"]
            assert res["results"][0]["status"] == "succeeded" and s.ran == [{"m": 1}]
            await asyncio.get_running_loop().run_in_executor(None, rx.wait, 3)
            done = verified(rx.requests[2])
            assert done["type"] == "approval.resolved" and done["approval"]["approval_id"] == item["approval_id"]
            assert done["approval"]["decision"] == "allow" and done["approval"]["reviewer"].startswith("car-server:operator:")
            assert done["approval_url"] == b["approval_url"]
            assert done["delivery_id"] != a["delivery_id"]
            await s.close()
            await op.close()

        run(go())
    finally:
        d.__exit__(None, None, None)
        rx.close()
        shutil.rmtree(d.home, ignore_errors=True)


def test_a_receiver_that_never_succeeds_is_logged_and_admission_goes_on():
    rx = Receiver(fail_first=10**6)
    d = Daemon("--webhook", rx.url, "--webhook", "http://127.0.0.1:9/unreachable",
               env={"CAR_AUTH_TOKEN": OP, "CAR_WEBHOOK_SECRET": SECRET, "CAR_WEBHOOK_BACKOFF_MS": "20",
                    "CAR_WEBHOOK_ATTEMPTS": "3"})
    try:
        async def go():
            s = await submitter(d.url, admission={**ASK_ECHO, "approval_timeout_ms": 1500})
            t0 = time.time()
            resp = await s.request("proposal.submit", {"proposal": proposal([tool_call("e1", "echo")], "wh-2")})
            # Nobody answered: refused at the approval's timeout, not blocked by the webhooks.
            assert resp["error"]["data"]["code"] == "approval_timeout", resp
            assert time.time() - t0 < 15
            # The daemon still answers.
            assert await s.call("state.keys") == []
            await s.close()

        run(go())
        end = time.time() + 10
        while time.time() < end and d.text().count("not delivered after 3 attempt(s)") < 2:
            time.sleep(0.05)
        log = d.text()
        assert f"webhook {rx.url}: approval.requested" in log and "HTTP 503" in log, log
        assert "webhook http://127.0.0.1:9/unreachable: approval.requested" in log and "cannot connect" in log, log
        assert log.count("not delivered after 3 attempt(s)") >= 2, log
        assert d.proc.poll() is None
    finally:
        d.__exit__(None, None, None)
        rx.close()
        shutil.rmtree(d.home, ignore_errors=True)


@pytest.mark.parametrize("args,env,needle", [
    (["--webhook", "https://example.com/h"], {"CAR_WEBHOOK_SECRET": SECRET}, "no TLS stack"),
    (["--webhook", "ftp://example.com/h"], {"CAR_WEBHOOK_SECRET": SECRET}, "not an http:// URL"),
    (["--webhook", "http://127.0.0.1:9/h"], {}, "needs CAR_WEBHOOK_SECRET"),
    (["--webhook", "http://127.0.0.1:9/h"], {"CAR_WEBHOOK_SECRET": "short"}, "at least 16 characters"),
    ([], {"CAR_WEBHOOKS": "http://127.0.0.1:9/a, https://x/b", "CAR_WEBHOOK_SECRET": SECRET}, "`https://x/b`"),
    (["--webhook", "http://127.0.0.1:9/h", "--webhook-secret-file", "/nonexistent/secret"], {},
     "--webhook-secret-file `/nonexistent/secret`"),
])
def test_bad_webhook_configurations_refuse_to_start_naming_the_input(args, env, needle, tmp_path):
    e = {"CAR_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **env}
    p = subprocess.run([BIN, "--port", "0", *args], env=e, capture_output=True, text=True, timeout=20)
    assert p.returncode != 0
    assert needle in p.stderr, p.stderr
