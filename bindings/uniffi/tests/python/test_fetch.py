"""`http_fetch` through the generated UniFFI Python bindings against an HTTP
server on loopback: allowlisted loopback reached, internal addresses refused
before any connection."""
import http.server
import json
import threading

import car_runtime_uniffi as car

SEEN = []


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        SEEN.append(self.path)
        body = b"hello from uniffi"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Host(car.ToolHandler):
    def call(self, call_json):
        raise car.ToolError.Failed("no host tools here")


def fetch(rt, url):
    plan = {"id": "p", "actions": [{"id": "f", "type": "tool_call", "tool": "http_fetch",
                                    "parameters": {"url": url}, "max_retries": 0}]}
    return json.loads(rt.execute_proposal(json.dumps(plan), Host(), None, None))["results"][0]


def main():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    try:
        rt = car.CarRuntime()
        rt.register_fetch_tool()
        for url in [f"http://127.0.0.1:{port}/", f"http://2130706433:{port}/", "http://169.254.169.254/"]:
            r = fetch(rt, url)
            assert r["status"] == "failed" and "refused" in r["error"], (url, r)
        assert SEEN == [], SEEN
        rt.set_permissions(json.dumps({"inspectors": {"egress_allowlist": ["127.0.0.1"]}}), None)
        r = fetch(rt, f"http://127.0.0.1:{port}/")
        assert r["status"] == "succeeded", r
        assert r["output"]["body"] == "hello from uniffi", r
        assert SEEN == ["/"], SEEN
    finally:
        httpd.shutdown()
        httpd.server_close()
    print("uniffi fetch: ok")


if __name__ == "__main__":
    main()
