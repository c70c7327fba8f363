"""The first-party fetch tool `http_fetch` through the Python binding, against
HTTP and HTTPS servers on loopback that the tests start: the allowlist's
addresses unlock loopback, internal addresses are refused before connecting,
redirects get the same checks, and TLS certificates are verified."""
import http.server
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import threading

import pytest

import car_runtime as car


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args):  # quiet
        pass

    def _reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        _Handler.seen.append((self.command, self.path, dict(self.headers)))
        if self.path == "/ok":
            self._reply(200, b"hello from python", [("Content-Type", "text/plain")])
        elif self.path == "/to-metadata":
            self._reply(302, headers=[("Location", "http://169.254.169.254/latest/meta-data/")])
        elif self.path == "/to-ok":
            self._reply(301, headers=[("Location", "/ok")])
        else:
            self._reply(404, b"missing")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        _Handler.seen.append((self.command, self.path, dict(self.headers)))
        self._reply(200, body)


def _serve(server):
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return server


@pytest.fixture
def server():
    _Handler.seen = []
    s = _serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler))
    yield s
    s.shutdown()
    s.server_close()


def _fetch(rt, params):
    p = {"id": "p", "actions": [{"id": "f", "type": "tool_call", "tool": "http_fetch",
                                 "parameters": params, "max_retries": 0}]}
    return json.loads(rt.execute_proposal(p, lambda call: {"host": True}))["results"][0]


def _runtime(config):
    rt = car.CarRuntime()
    rt.register_fetch_tool()
    rt.set_permissions(json.dumps(config))
    return rt


def test_fetch_from_an_allowlisted_loopback_address(server):
    port = server.server_address[1]
    rt = _runtime({"inspectors": {"egress_allowlist": ["127.0.0.1"]}})
    r = _fetch(rt, {"url": f"http://127.0.0.1:{port}/ok"})
    assert r["status"] == "succeeded", r
    assert r["output"]["status"] == 200 and r["output"]["body"] == "hello from python", r
    assert r["output"]["headers"]["content-type"] == "text/plain"
    r = _fetch(rt, {"url": f"http://127.0.0.1:{port}/echo", "method": "POST", "body": "ping"})
    assert r["output"]["body"] == "ping", r
    # A redirect is followed through the same checks.
    r = _fetch(rt, {"url": f"http://127.0.0.1:{port}/to-ok"})
    assert r["output"]["body"] == "hello from python", r
    assert r["output"]["redirects"] == [f"http://127.0.0.1:{port}/ok"]
    # A redirect to the metadata address is refused, and not followed.
    before = len(_Handler.seen)
    r = _fetch(rt, {"url": f"http://127.0.0.1:{port}/to-metadata"})
    assert r["status"] == "failed" and "169.254.169.254" in r["error"], r
    assert len(_Handler.seen) == before + 1


def test_internal_addresses_are_refused_before_connecting(server):
    port = server.server_address[1]
    rt = _runtime({})
    for host in ["127.0.0.1", "localhost", "2130706433", "0x7f000001", "127.1", "[::ffff:127.0.0.1]", "[::1]"]:
        r = _fetch(rt, {"url": f"http://{host}:{port}/ok"})
        assert r["status"] == "failed", (host, r)
        assert "refused" in r["error"] and "loopback" in r["error"], (host, r)
    for url in ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://10.1.2.3/"]:
        r = _fetch(rt, {"url": url})
        assert r["status"] == "failed" and "refused" in r["error"], (url, r)
    assert _Handler.seen == []
    # A domain rule on the name denies at admission.
    rt = _runtime({"inspectors": {"egress_allowlist": ["127.0.0.1"]},
                   "deny": [{"tool": "http_fetch", "domains": ["127.0.0.1"]}]})
    r = _fetch(rt, {"url": f"http://127.0.0.1:{port}/ok"})
    assert r["status"] == "rejected", r
    assert _Handler.seen == []


def test_https_certificates_are_verified():
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test's certificate (scripts/test installs it)")
    d = tempfile.mkdtemp(prefix="car-py-fetch-")
    try:
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        _Handler.seen = []
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        _serve(httpd)
        try:
            port = httpd.server_address[1]
            rt = _runtime({"inspectors": {"egress_allowlist": ["127.0.0.1"]}})
            r = _fetch(rt, {"url": f"https://127.0.0.1:{port}/ok", "timeout_ms": 10000})
            assert r["status"] == "failed", r
            assert "TLS" in r["error"] and "certificate" in r["error"].lower(), r
            assert _Handler.seen == [], "no request is sent over an unverified connection"
        finally:
            httpd.shutdown()
            httpd.server_close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
