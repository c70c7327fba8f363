#!/usr/bin/env python3
"""Differential test of verify / simulate / optimize / equivalent /
transaction_check against the original runtime (not run by CI).

Run it with a Python that has the original `car_runtime` (0.58.0) installed:

    /tmp/oracle/bin/python scripts/oracle-diff-verify.py [--cases 400] [--seed 1]
        [--explicit-deps] [--all-operators] [--single-writer] [--show 2]
        [--out /tmp/verify-diff.json]

It generates small random proposals over a few keys and tools, asks the
oracle, then asks this crate through `tests/verify_oracle_bridge.rs` (an
ignored test run with `cargo test --test integration -- --ignored verify_oracle_bridge::`),
and prints the mismatches grouped by method and field with examples. Each
mismatch class is either fixed or recorded in docs/compatibility.md under
"## Verification". `--explicit-deps` also generates `dependencies`, which the
original ignores (a known, documented difference).
"""

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile

import car_runtime as oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = ["k0", "k1", "k2", "k3"]
TOOLS = ["t0", "t1", "t2"]
# Operators whose verdicts agree with the original. `neq` (on an absent key),
# `eq` null (on an absent key) and `contains` (on a scalar) are evaluated
# differently on purpose (docs/compatibility.md); `--all-operators` adds them.
OPS = ["eq", "gt", "lt", "gte", "lte", "exists", "not_exists", "weird"]
ALL_OPS = OPS + ["neq", "contains"]
VALUES = [None, True, False, 0, 1, 2, 1.5, "s", "abc", [1, 2], {"q": 1}]


ALL = False
# With --single-writer each key is written by at most one action. The original
# orders a reader after the *last* writer of a key in the whole proposal (and
# only when that writer comes first), we after the most recent *earlier*
# writer; with one writer per key the two rules coincide, so every remaining
# difference is something else.
SINGLE = False


def fresh_key(rng, used):
    free = [k for k in KEYS if k not in used]
    if SINGLE and not free:
        return None
    k = rng.choice(free if SINGLE else KEYS)
    used.add(k)
    return k


def gen_action(rng, i, ids, explicit, used):
    kind = rng.random()
    a = {"id": f"a{i}"}
    if kind < 0.7:
        a["type"] = "tool_call"
        a["tool"] = rng.choice(TOOLS)
        if rng.random() < 0.5:
            a["parameters"] = {"x": rng.choice([1, 2, "s", True])}
    elif kind < 0.9:
        a["type"] = "state_write"
        a["parameters"] = {"key": fresh_key(rng, used) or f"unused{i}", "value": rng.choice(VALUES)}
        if rng.random() < 0.2:
            del a["parameters"]["value"]
    else:
        a["type"] = rng.choice(["state_read", "assertion"])
    if rng.random() < 0.35:
        a["preconditions"] = [
            {"key": rng.choice(KEYS), "operator": rng.choice(OPS), "value": rng.choice(VALUES[1:] if not ALL else VALUES)}
            for _ in range(rng.randint(1, 2))
        ]
    if rng.random() < 0.6:
        effects = {fresh_key(rng, used): rng.choice(VALUES) for _ in range(rng.randint(1, 2))}
        a["expected_effects"] = {k: v for k, v in effects.items() if k is not None}
    if rng.random() < 0.45:
        a["state_dependencies"] = [rng.choice(KEYS) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.1:
        a["read_set"] = [rng.choice(KEYS)]
    if rng.random() < 0.1 and not SINGLE:
        a["write_set"] = [rng.choice(KEYS)]
    if rng.random() < 0.15:
        asm = {"key": rng.choice(KEYS)}
        if rng.random() < 0.5:
            asm["expected_value"] = rng.choice(VALUES)
        if rng.random() < 0.5:
            asm["read_version"] = rng.randint(0, 3)
        a["assumptions"] = [asm]
    r = rng.random()
    if r < 0.1:
        a["reversibility"] = "compensable"
    elif r < 0.15:
        a["reversibility"] = "reversible"
    r = rng.random()
    if r < 0.07:
        a["compensation"] = {"type": "tool", "tool": rng.choice(TOOLS + ["undo"])}
    elif r < 0.12:
        a["compensation"] = {"type": "action_ref", "action_id": rng.choice(ids + ["zz"])}
    if explicit and rng.random() < 0.2:
        a["dependencies"] = [rng.choice(ids + ["zz"])]
    return a


def gen_case(rng, explicit):
    n = rng.choice([0, 1, 2, 3, 3, 4, 5, 6, 8])
    ids = [f"a{i}" for i in range(n)]
    used = set()
    actions = [gen_action(rng, i, ids, explicit, used) for i in range(n)]
    proposal = {"id": "p", "source": "diff", "timestamp": "2026-05-02T12:00:00Z", "actions": actions}
    state = {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.3}
    tool_names = rng.choice([None, None, TOOLS[:2], TOOLS, []])
    schemas = None
    if rng.random() < 0.3:
        schemas = [
            {
                "name": t,
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": rng.choice(["integer", "string", "boolean", "number"])}},
                    "required": rng.choice([[], ["x"]]),
                },
            }
            for t in TOOLS[: rng.randint(0, 3)]
        ]
    max_actions = rng.choice([None, None, None, 2, 5])
    versions = {k: rng.randint(0, 3) for k in KEYS if rng.random() < 0.5}
    return proposal, state, tool_names, schemas, max_actions, versions


def mutate(rng, proposal):
    p = json.loads(json.dumps(proposal))
    if p["actions"] and rng.random() < 0.7:
        a = rng.choice(p["actions"])
        choice = rng.random()
        if choice < 0.4:
            a["expected_effects"] = {rng.choice(KEYS): rng.choice(VALUES)}
        elif choice < 0.7:
            a["preconditions"] = [{"key": "x", "operator": "eq", "value": 1}]
        else:
            a["state_dependencies"] = [rng.choice(KEYS + ["x"])]
    return p


def oracle_answer(method, params):
    try:
        if method == "verify":
            r = oracle.verify(
                json.dumps(params["proposal"]),
                json.dumps(params["initial_state"]),
                params.get("tool_names"),
                params.get("max_actions"),
                None if params.get("tool_schemas") is None else json.dumps(params["tool_schemas"]),
            )
        elif method == "simulate":
            r = oracle.simulate(json.dumps(params["proposal"]), json.dumps(params["initial_state"]))
        elif method == "optimize":
            r = oracle.optimize(json.dumps(params["proposal"]))
        elif method == "equivalent":
            return {"ok": oracle.equivalent(json.dumps(params["p1"]), json.dumps(params["p2"]))}
        elif method == "transaction_check":
            r = oracle.transaction_check(
                json.dumps(params["proposal"]), json.dumps(params["versions"]), json.dumps(params["state"])
            )
        else:
            raise ValueError(method)
        return {"ok": json.loads(r)}
    except Exception as e:  # noqa: BLE001 - the oracle raises ValueError and friends
        return {"error": type(e).__name__, "message": str(e)}


def ours(cases):
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w") as f:
            for method, params in cases:
                f.write(json.dumps({"method": method, "params": params}) + "\n")
        env = dict(os.environ, CAR_DIFF_IN=inp, CAR_DIFF_OUT=out)
        subprocess.run(
            ["cargo", "test", "-q", "--test", "integration", "--", "--ignored", "verify_oracle_bridge::"],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        with open(out) as f:
            return [json.loads(line) for line in f]


def differing_fields(method, want, got):
    """The parts of an answer that differ, as short labels."""
    if "error" in want or "error" in got:
        return [] if ("error" in want) == ("error" in got) else ["error"]
    w, g = want["ok"], got["ok"]
    if method == "verify":
        out = [k for k in ["valid", "simulated_state", "execution_levels"] if w.get(k) != g.get(k)]
        if w.get("issues") != g.get("issues"):
            plain = lambda r: [i for i in r.get("issues", []) if not i["message"].startswith("write conflict")]  # noqa: E731
            canon = lambda xs: sorted(json.dumps(x, sort_keys=True) for x in xs)  # noqa: E731
            if canon(w.get("issues", [])) == canon(g.get("issues", [])):
                out.append("issues.order")
            elif plain(w) != plain(g):
                out.append("issues")
            else:
                out.append("issues.write_conflict_only")
        if w.get("conflicts") != g.get("conflicts"):
            same_set = sorted(map(tuple, w.get("conflicts", []))) == sorted(map(tuple, g.get("conflicts", [])))
            out.append("conflicts.order" if same_set else "conflicts")
        we, ge = w.get("evidence", {}), g.get("evidence", {})
        for k in ["assumptions", "untested_regions", "residual_risks", "confidence"]:
            if we.get(k) != ge.get(k):
                out.append("evidence." + k)
        wc = {c["name"]: c for c in we.get("checks", [])}
        gc = {c["name"]: c for c in ge.get("checks", [])}
        for name in sorted(set(wc) | set(gc)):
            if wc.get(name) != gc.get(name):
                out.append("evidence.checks." + name)
        return out
    if method == "optimize":
        strip = lambda p: [{k: v for k, v in a.items() if k != "dependencies"} for a in p.get("actions", [])]  # noqa: E731
        return [] if strip(w) == strip(g) else ["actions"]
    if method == "transaction_check":
        out = []
        if w.get("consistent") != g.get("consistent"):
            out.append("consistent")
        if w.get("conflicts") != g.get("conflicts"):
            key = lambda c: json.dumps(c, sort_keys=True)  # noqa: E731
            same_set = sorted(map(key, w.get("conflicts", []))) == sorted(map(key, g.get("conflicts", [])))
            out.append("conflicts.order" if same_set else "conflicts")
        return out
    return [] if w == g else ["value"]


def focus(method, field, answer):
    """The part of an answer a mismatch label names."""
    v = answer.get("ok", answer)
    if method != "verify" or not isinstance(v, dict):
        return v
    if field.startswith("evidence.checks."):
        name = field.split(".", 2)[2]
        return [c for c in v.get("evidence", {}).get("checks", []) if c["name"] == name]
    if field.startswith("evidence."):
        return v.get("evidence", {}).get(field.split(".", 1)[1])
    return v.get(field)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--explicit-deps", action="store_true")
    ap.add_argument("--all-operators", action="store_true")
    ap.add_argument("--single-writer", action="store_true")
    ap.add_argument("--show", type=int, default=2)
    ap.add_argument("--out", default=None, help="write every mismatch here as JSON")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    global ALL, OPS, SINGLE
    SINGLE = args.single_writer
    if args.all_operators:
        ALL, OPS = True, ALL_OPS
    cases = []
    for _ in range(args.cases):
        proposal, state, tool_names, schemas, max_actions, versions = gen_case(rng, args.explicit_deps)
        vp = {"proposal": proposal, "initial_state": state}
        if tool_names is not None:
            vp["tool_names"] = tool_names
        if max_actions is not None:
            vp["max_actions"] = max_actions
        if schemas is not None:
            vp["tool_schemas"] = schemas
        cases.append(("verify", vp))
        cases.append(("simulate", {"proposal": proposal, "initial_state": state}))
        cases.append(("optimize", {"proposal": proposal}))
        cases.append(("equivalent", {"p1": proposal, "p2": mutate(rng, proposal)}))
        cases.append(("transaction_check", {"proposal": proposal, "versions": versions, "state": state}))
    got = ours(cases)
    classes = collections.defaultdict(list)
    for (method, params), g in zip(cases, got):
        w = oracle_answer(method, params)
        for field in differing_fields(method, w, g):
            classes[(method, field)].append({"params": params, "oracle": w, "ours": g})
    per_method = collections.Counter(m for m, _ in cases)
    print(f"{len(cases)} calls ({dict(per_method)}), seed {args.seed}")
    if not classes:
        print("no differences")
    for (method, field), items in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        print(f"\n== {method} / {field}: {len(items)} of {per_method[method]}")
        for item in sorted(items, key=lambda it: len(json.dumps(it["params"])))[: args.show]:
            print("  params:", json.dumps(item["params"]))
            w, g = focus(method, field, item["oracle"]), focus(method, field, item["ours"])
            print("  oracle:", json.dumps(w)[:1500])
            print("  ours:  ", json.dumps(g)[:1500])
    if args.out:
        with open(args.out, "w") as f:
            json.dump({f"{m}/{k}": v for (m, k), v in classes.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
