#!/usr/bin/env python3
"""Side-by-side speed of our bindings and the original runtime (a script, not a test).

Builds nothing and installs nothing: it takes the paths of Python
environments that already hold the packages and runs each one in a child
process of its own (this file, `--worker ...`), on the same proposals, in one
run, and prints the tables of issue #21 with ratios (original / ours: above 1
means we are faster).

    benches/compare.py OURS_ENV ORIGINAL_ENV [--engine-original ENV]
                       [--node bindings/node] [--facade BIN] [--n 5000]
                       [--exec-n 3000] [--repeats 5] [--rounds 3]
                       [--only pure|exec]

* OURS_ENV: a virtualenv with our `car_runtime` (for real figures
  `maturin develop --release` in bindings/python).
* ORIGINAL_ENV: a virtualenv with `pip install car-runtime==0.58.0` (the pure
  functions).
* --engine-original ENV: a virtualenv with `car-runtime==0.7.0` (the embedded
  engine), for the execution table; without it that table has no original.
* --node DIR: our Node package directory with its addon built
  (`npx napi build --platform --release`); adds a Node column.
* --facade BIN: `examples/facade_time` (`cargo build --release --example
  facade_time`): the Rust facade functions on the same JSON text, the
  reference the bindings' overhead is measured against.

Pure functions: `verify` (with `max_actions` = the number of actions),
`simulate`, `optimize`, `transaction_check` on 5,000-action chain and wide
proposals, the shapes of benches/support/verify_shapes.rs. Best of REPEATS
after one warm-up.

Execution (a no-op tool in the host language, `tool(name, params_json)`):
3,000 independent tool calls, a 3,000-action chain (each action reads the key
the previous one's expected effects wrote: the one chain both runtimes order),
3,000 `state_write`s, and 1,000 / 10,000 `state_write`s per action; on one
long-lived runtime reused across runs (as applications do) and on a fresh
runtime per run (made outside the timing). Best of REPEATS after one warm-up.
The 1,000 / 10,000 comparison is printed twice: best single runs, and with
ten runs of 1,000 timed as one sample. A long-lived runtime's log grows
into new memory, which the kernel zeroes when it is first touched; a run
of 1,000 grows it by less than a megabyte, so its best run can be one that
took no new page, where no run of 10,000 is.

Every environment runs ROUNDS times in turn (original, ours, Node, facade,
then again) and each figure is its best over the rounds: the machine's speed
drifts by a third over minutes, and one pass per side would let a slow
minute land on one side only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# --- proposals (the shapes of benches/support/verify_shapes.rs) -------------


def verify_action(i, chain):
    a = {"id": f"a{i}", "type": "tool_call", "tool": f"tool_{i % 50}", "parameters": {"n": i},
         "expected_effects": {f"k{i}": i}}
    if chain and i > 0:
        a["state_dependencies"] = [f"k{i - 1}"]
        a["preconditions"] = [{"key": f"k{i - 1}", "operator": "exists", "value": None}]
    return a


def verify_proposal(n, chain):
    return json.dumps({"actions": [verify_action(i, chain) for i in range(n)]})


def exec_proposals(n):
    """The execution shapes: name -> (proposal text, number of actions)."""
    wide = [{"id": f"a{i}", "type": "tool_call", "tool": "noop", "parameters": {"i": i}} for i in range(n)]
    chain = [{"id": f"c{i}", "type": "tool_call", "tool": "noop", "parameters": {"i": i},
              "state_dependencies": [f"c{i - 1}"] if i else [], "expected_effects": {f"c{i}": i}}
             for i in range(n)]

    def writes(m):
        return [{"id": f"w{i}", "type": "state_write", "parameters": {"key": f"k{i}", "value": i}} for i in range(m)]

    return {
        f"{n:,} independent tool calls": (json.dumps({"actions": wide}), n),
        f"{n:,}-action chain": (json.dumps({"actions": chain}), n),
        f"{n:,} state_writes": (json.dumps({"actions": writes(n)}), n),
        "1,000 state_writes": (json.dumps({"actions": writes(1000)}), 1000),
        "10,000 state_writes": (json.dumps({"actions": writes(10000)}), 10000),
    }


# --- workers (run inside each environment) ----------------------------------


def best_of(repeats, f):
    f()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3


def worker_pure(files, repeats):
    import car_runtime as car

    out = {}
    for path in files:
        text = open(path).read()
        n = len(json.loads(text)["actions"])
        calls = {
            "verify": lambda: car.verify(text, None, None, n),
            "simulate": lambda: car.simulate(text),
            "optimize": lambda: car.optimize(text),
            "transaction_check": lambda: car.transaction_check(text),
        }
        for name, f in calls.items():
            out[f"{name} {os.path.basename(path)}"] = best_of(repeats, f)
    return out


def worker_exec(files, repeats):
    os.environ.setdefault("CAR_FFI_NO_DAEMON_WARNING", "1")  # the original's daemon probe
    import car_runtime as car

    def noop(tool, params_json):
        return "{}"

    def runtime():
        rt = car.CarRuntime()
        rt.register_tool("noop")
        return rt

    out = {}
    for label, path in files:
        text = open(path).read()
        n = len(json.loads(text)["actions"])
        long_lived = runtime()

        def check(res):
            r = json.loads(res)
            done = sum(1 for x in r["results"] if x["status"] == "succeeded")
            if done != n:
                raise SystemExit(f"{label}: {done} of {n} actions succeeded")

        check(long_lived.execute_proposal(text, noop))
        out[f"long {label}"] = best_of(repeats, lambda: long_lived.execute_proposal(text, noop))
        if label == "1,000 state_writes" and any(other == "10,000 state_writes" for other, _ in files):
            # Ten runs timed as one sample: it grows the log into as much new
            # memory as one run of 10,000 (a best single run of 1,000 can be
            # one that took no new page).
            ten = best_of(repeats, lambda: [long_lived.execute_proposal(text, noop) for _ in range(10)])
            out[f"long {label} x10"] = ten / 10
        fresh = []
        for _ in range(repeats):
            rt = runtime()
            t0 = time.perf_counter()
            rt.execute_proposal(text, noop)
            fresh.append(time.perf_counter() - t0)
        out[f"fresh {label}"] = min(fresh) * 1e3
    return out


# --- the driver --------------------------------------------------------------


def run_worker(python, kind, args, repeats):
    cmd = [python, os.path.abspath(__file__), "--worker", kind, "--repeats", str(repeats), "--", *args]
    env = dict(os.environ, CAR_FFI_NO_DAEMON_WARNING="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_node(node_dir, kind, args, repeats):
    script = os.path.join(HERE, "compare_node.js")
    r = subprocess.run(["node", script, os.path.abspath(node_dir), kind, str(repeats), *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"node {kind} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_facade(binary, files, repeats):
    r = subprocess.run([binary, str(repeats), *files], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{binary} failed:\n{r.stderr}")
    out = {}
    for line in r.stdout.splitlines():
        row = json.loads(line)
        out[f"{row['function']} {os.path.basename(row['file'])}"] = row["best_ms"]
    return out


def rounds(n, runs):
    """Runs every function of `runs` in turn, `n` times over, and returns for
    each the best (lowest) figure of every key across its rounds."""
    best = [{} for _ in runs]
    for r in range(n):
        for i, run in enumerate(runs):
            for key, v in run().items():
                best[i][key] = min(v, best[i].get(key, v))
        print(f"round {r + 1} of {n} done", file=sys.stderr, flush=True)
    return best


def env_python(env):
    for rel in ("bin/python", "Scripts/python.exe"):
        p = os.path.join(env, rel)
        if os.path.exists(p):
            return p
    raise SystemExit(f"{env}: no bin/python; pass the path of a virtual environment")


def ratio(a, b):
    return f"{a / b:.1f}x" if a and b else "-"


def ms(v):
    return f"{v:.2f} ms" if v is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ours")
    ap.add_argument("original")
    ap.add_argument("--engine-original")
    ap.add_argument("--node")
    ap.add_argument("--facade")
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--exec-n", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--original-max", type=int, default=3000,
                    help="run execution shapes of at most this many actions on the original (0.7.0 takes"
                         " about a minute per run of 10,000 state_writes)")
    ap.add_argument("--only", choices=["pure", "exec"])
    ap.add_argument("--rounds", type=int, default=3,
                    help="run every environment this many times in turn and keep each figure's best:"
                         " a slow minute of a shared machine then hits every side, not just one")
    a = ap.parse_args()
    ours, orig = env_python(a.ours), env_python(a.original)

    with tempfile.TemporaryDirectory(prefix="car-compare-") as tmp:
        if a.only != "exec":
            files = []
            for shape in ("chain", "wide"):
                path = os.path.join(tmp, f"{shape}.json")
                with open(path, "w") as f:
                    f.write(verify_proposal(a.n, shape == "chain"))
                files.append(path)
            o, p, nd, fc = rounds(a.rounds, [
                lambda: run_worker(orig, "pure", files, a.repeats),
                lambda: run_worker(ours, "pure", files, a.repeats),
                lambda: run_node(a.node, "pure", files, a.repeats) if a.node else {},
                lambda: run_facade(a.facade, files, a.repeats) if a.facade else {},
            ])
            print(f"\nPure functions, {a.n:,} actions (best of {a.repeats} in each of {a.rounds} rounds;"
                  " ratio = original / ours)\n")
            print("| call | original 0.58.0 (Python) | ours (Python) | ratio | ours (Node) | ratio "
                  "| Rust facade | Python / facade | Node / facade |")
            print("|---|---|---|---|---|---|---|---|---|")
            for key in o:
                fn, shape = key.split(" ")
                shape = shape.replace(".json", "")
                print(f"| `{fn}`, {shape} | {ms(o[key])} | {ms(p[key])} | {ratio(o[key], p[key])} "
                      f"| {ms(nd.get(key))} | {ratio(o[key], nd.get(key))} | {ms(fc.get(key))} "
                      f"| {ratio(p[key], fc.get(key))} | {ratio(nd.get(key), fc.get(key))} |")

        if a.only != "pure":
            shapes = exec_proposals(a.exec_n)
            files = []
            for i, (label, (text, _)) in enumerate(shapes.items()):
                path = os.path.join(tmp, f"exec{i}.json")
                with open(path, "w") as f:
                    f.write(text)
                files.append((label, path))
            flat = [x for lp in files for x in lp]
            small = [x for (label, path) in files if shapes[label][1] <= a.original_max for x in (label, path)]
            o, p, nd = rounds(a.rounds, [
                lambda: run_worker(env_python(a.engine_original), "exec", small, a.repeats) if a.engine_original else {},
                lambda: run_worker(ours, "exec", flat, a.repeats),
                lambda: run_node(a.node, "exec", flat, a.repeats) if a.node else {},
            ])
            print(f"\nExecution with a no-op tool (best of {a.repeats} in each of {a.rounds} rounds;"
                  " ratio = original / ours)\n")
            print("| proposal | runtime | original 0.7.0 (Python) | ours (Python) | ratio | ours (Node) | ratio |")
            print("|---|---|---|---|---|---|---|")
            for label, _ in files:
                for kind in ("long", "fresh"):
                    key = f"{kind} {label}"
                    print(f"| {label} | {'long-lived' if kind == 'long' else 'fresh'} | {ms(o.get(key))} "
                          f"| {ms(p[key])} | {ratio(o.get(key), p[key])} | {ms(nd.get(key))} "
                          f"| {ratio(o.get(key), nd.get(key))} |")
            def per_action(small):
                for name, r in (("original", o), ("ours (Python)", p), ("ours (Node)", nd)):
                    if small in r and "long 10,000 state_writes" in r:
                        k1, k10 = r[small] / 1000, r["long 10,000 state_writes"] / 10000
                        print(f"  {name}: {k1 * 1e3:.2f} us -> {k10 * 1e3:.2f} us per action ({k10 / k1:.2f}x)")

            print("\nPer action, 10,000 vs 1,000 state_writes on the long-lived runtime:")
            per_action("long 1,000 state_writes")
            print("The same, with ten runs of 1,000 timed as one sample (as much new log memory as a run of 10,000):")
            per_action("long 1,000 state_writes x10")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        kind = sys.argv[2]
        repeats = int(sys.argv[4])
        args = sys.argv[6:]
        if kind == "pure":
            res = worker_pure(args, repeats)
        else:
            res = worker_exec(list(zip(args[0::2], args[1::2])), repeats)
        print(json.dumps(res))
    else:
        main()
