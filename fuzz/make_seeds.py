#!/usr/bin/env python3
"""Writes fuzz/seeds/<target>/ from the conformance corpus and the policy
fixtures, so every target starts from valid inputs (not committed:
fuzz/seeds/ is generated). Run from the repository
root: python3 fuzz/make_seeds.py"""
import glob, hashlib, json, os, re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds")
SRC = open(os.path.join(ROOT, "fuzz", "fuzz_targets", "facade_call.rs")).read()
METHODS = re.findall(r'^    "([a-z_]+)",$', SRC, re.M)


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


session = []
for path in sorted(glob.glob(os.path.join(ROOT, "tests/conformance/*/*.json"))):
    for case in json.load(open(path))["cases"]:
        if "method" not in case:
            # The admission corpus: a document and a proposal per case.
            if isinstance(case.get("proposal"), dict):
                put("ir_parse", json.dumps(case["proposal"]))
                put("rpc_session", "\n".join(json.dumps(f) for f in [
                    {"jsonrpc": "2.0", "id": 1, "method": "admission.configure", "params": {"config": case.get("config", {})}},
                    {"jsonrpc": "2.0", "id": 2, "method": "proposal.plan", "params": {"proposal": case["proposal"]}},
                    {"jsonrpc": "2.0", "id": 3, "method": "proposal.submit", "params": {"proposal": case["proposal"]}},
                ]))
            continue
        m, params = case["method"], case.get("params", {})
        if m in METHODS:
            put("facade_call", bytes([METHODS.index(m)]) + json.dumps(params).encode())
        for k in ("proposal", "p1", "p2"):
            p = params.get(k)
            if isinstance(p, dict):
                put("ir_parse", json.dumps(p))
            elif isinstance(p, str):
                put("ir_parse", p)
        if isinstance(params.get("rules"), str):
            put("policy_file", params["rules"])
        if m == "match_shell_command":
            r = params.get("rules", {})
            r = json.loads(r) if isinstance(r, str) else r
            lines = [pre + p for key, pre in (("allow", "+"), ("ask", "?"), ("deny", "!")) for p in r.get(key, [])]
            put("shell_match", "\n".join(lines) + "\0" + params.get("command", ""))
        frame = {"jsonrpc": "2.0", "id": 1, "method": m, "params": params}
        put("rpc_frame", json.dumps(frame))
        put("rpc_session", json.dumps(frame))

for path in glob.glob(os.path.join(ROOT, "tests/policy_fixtures/**/*.toml"), recursive=True):
    put("policy_file", open(path, "rb").read())

for frame in [
    '{"jsonrpc":"2.0","id":7,"result":{"ok":true}}',
    '{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}',
    '[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":null,"method":"b","params":[]}]',
    '{"jsonrpc":"1.0","id":{},"method":""}',
]:
    put("rpc_frame", frame)
