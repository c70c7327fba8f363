#!/usr/bin/env python3
"""Records the original runtime's planning functions on generated inputs.

Run with the original 0.58.0 wheel installed (never needed by the build or
the tests):

    python3 -m venv /tmp/oracle58 && /tmp/oracle58/bin/pip install car-runtime==0.58.0
    /tmp/oracle58/bin/python scripts/oracle-record-planning.py > tests/fixtures/planning_oracle.json

`tests/planning_oracle.rs` replays the cases against our core. Inputs stay
inside the region where both runtimes define the same thing: one writer per
key, readers after their writer, preconditions only on initial-state keys,
no explicit `dependencies`; nothing to gate in the prediction cases (see
docs/compatibility.md, "Planning").
"""
import json
import random
import sys

import car_runtime as car

rng = random.Random(58)
KEYS = [f"k{i}" for i in range(8)]
TOOLS = ["alpha", "beta", "gamma", "delta"]
VALUES = [1, 2, "on", "off", True, None, [1, 2], {"z": 1, "a": 2}, 2.5]


def gen_proposal(n, with_reads=True):
    written = []
    free = KEYS[:]
    rng.shuffle(free)
    initial = {k: rng.choice([1, 5, "x"]) for k in ["s0", "s1"] if rng.random() < 0.7}
    actions = []
    for i in range(n):
        a = {"id": f"a{i}"}
        if rng.random() < 0.8:
            a["type"] = "tool_call"
            a["tool"] = rng.choice(TOOLS)
            a["parameters"] = {"i": i}
        else:
            a["type"] = "state_write"
            key = free.pop() if free else None
            if key is None:
                a["type"] = "state_read"
                a["parameters"] = {"key": "s0"}
            else:
                written.append(key)
                a["parameters"] = {"key": key, "value": rng.choice(VALUES)}
        effects = {}
        for _ in range(rng.randint(0, 2)):
            if free:
                k = free.pop()
                written.append(k)
                effects[k] = rng.choice(VALUES)
        if effects:
            a["expected_effects"] = effects
        if with_reads and written and rng.random() < 0.5:
            own = set(effects) | ({a["parameters"]["key"]} if a["type"] == "state_write" else set())
            earlier = [k for k in written if k not in own]
            if earlier:
                a["state_dependencies"] = rng.sample(earlier, min(len(earlier), rng.randint(1, 2)))
        if with_reads and rng.random() < 0.1:
            a.setdefault("state_dependencies", []).append("phantom")
        if rng.random() < 0.25:
            op = rng.choice(["exists", "not_exists", "gt", "eq"])
            pc = {"key": rng.choice(["s0", "s1"]), "operator": op}
            if op == "gt":
                pc["value"] = 2
            elif op == "eq":
                pc["value"] = rng.choice([1, 5, "x"])
            a["preconditions"] = [pc]
        actions.append(a)
    return {"actions": actions}, initial


def gen_goal(p):
    keys = [k for a in p["actions"] for k in a.get("expected_effects", {})]
    leaves = []
    for k in keys[:3]:
        leaves.append({"kind": "state_predicate", "key": k, "equals": p_value(p, k)})
    leaves.append(rng.choice([{"kind": "model_judge", "id": "j1"}, {"kind": "command", "id": "c1", "expect_exit": 0},
                              {"kind": "plan_achieved"}, {"kind": "state_predicate", "key": "nope", "equals": 1}]))
    rng.shuffle(leaves)
    return {"kind": rng.choice(["all_of", "any_of"]), "conditions": leaves}


def p_value(p, k):
    for a in p["actions"]:
        if k in a.get("expected_effects", {}):
            return a["expected_effects"][k]
    return None


cases = []
for c in range(40):
    p, init = gen_proposal(rng.randint(1, 9))
    rates = {t: rng.choice([0.0, 1.0, 0.3, 0.5, 0.75, 0.9]) for t in TOOLS if rng.random() < 0.75}
    goal = gen_goal(p) if rng.random() < 0.6 else None
    config = {"trials": rng.choice([1, 7, 50, 400]), "seed": rng.randrange(1 << 64)}
    if rng.random() < 0.5:
        config["retry_attempts"] = rng.randint(0, 3)
    if rng.random() < 0.3:
        config["default_success_rate"] = rng.choice([0.2, 0.8])
    if rng.random() < 0.15:
        config = None
    out = car.simulate_monte_carlo(json.dumps(p), json.dumps(init), json.dumps(rates),
                                   json.dumps(goal) if goal else None, json.dumps(config) if config else None)
    cases.append({"fn": "simulate_monte_carlo", "proposal": p, "initial_state": init, "rates": rates,
                  "goal": goal, "config": config, "expected": json.loads(out)})

for c in range(25):
    cands = [gen_proposal(rng.randint(1, 7), with_reads=rng.random() < 0.5)[0] for _ in range(rng.randint(1, 5))]
    if rng.random() < 0.3:
        # Write conflicts and repeated calls produce warnings.
        a = {"id": "w1", "type": "tool_call", "tool": "alpha", "expected_effects": {"dup": 1}}
        b = {"id": "w2", "type": "tool_call", "tool": "beta", "expected_effects": {"dup": 2}}
        cands.append({"actions": [a, b]})
    tools = rng.choice([None, TOOLS, TOOLS[:2]])
    w = rng.choice([None, 0.0, 0.5, 1.0])
    out = car.rank_proposals(json.dumps(cands), tools, w)
    cases.append({"fn": "rank_proposals", "candidates": cands, "tools": tools, "cost_weight": w,
                  "expected": json.loads(out)})

for c in range(25):
    # The original's predictive simulation applies every action's effects
    # (no gating), so these inputs have nothing to gate.
    p, init = gen_proposal(rng.randint(1, 8), with_reads=False)
    for a in p["actions"]:
        a.pop("preconditions", None)
    preds = {}
    for a in p["actions"]:
        if rng.random() < 0.5:
            eff = {}
            for _ in range(rng.randint(0, 2)):
                eff[rng.choice(KEYS + ["s0", "pk"])] = rng.choice(VALUES)
            preds[a["id"]] = {"effects": eff, "accuracy": rng.choice([0.2, 0.6, 0.9, 1.0])}
    m = rng.choice([0.0, 0.5, 0.9])
    out = car.simulate_with_predictions(json.dumps(p), json.dumps(preds), m, json.dumps(init))
    cases.append({"fn": "simulate_with_predictions", "proposal": p, "predictions": preds, "min_accuracy": m,
                  "initial_state": init, "expected": json.loads(out)})

for c in range(25):
    p, _ = gen_proposal(rng.randint(1, 6), with_reads=False)
    for a in p["actions"]:
        a.pop("preconditions", None)
    preds = {a["id"]: rng.sample(KEYS, rng.randint(0, 2)) for a in p["actions"] if rng.random() < 0.5}
    versions = {k: rng.randint(0, 3) for k in KEYS if rng.random() < 0.3}
    out = car.transaction_check_with_predictions(json.dumps(p), json.dumps(preds), json.dumps(versions), None)
    cases.append({"fn": "transaction_check_with_predictions", "proposal": p, "predictions": preds,
                  "versions": versions, "expected": json.loads(out)})

json.dump({"oracle": "car-runtime==0.58.0", "generator": "scripts/oracle-record-planning.py", "cases": cases},
          sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
