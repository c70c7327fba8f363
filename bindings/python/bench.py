"""Speed of the Python binding (a script, not a test): per-action cost of
execute_proposal with a no-op Python tool for 1,000 and 10,000 tool calls
(independent and as a chain) and state writes. Build a release extension
first (`maturin develop --release`) for real figures.

Each figure is the best and the median of REPEATS timed runs (after one
warm-up), in microseconds per action, including the Python callback: wall
time, and the calling thread's CPU time (the engine runs and the callbacks
are served on the calling thread, so on a loaded machine this is the steadier
measure of the binding's own cost).

Every timed run gets a fresh runtime (made outside the timing): a runtime
keeps its event log (no retention by default), so reusing one across runs
would time a log that grows with every earlier run (and its reallocations)
rather than the proposal. State writes therefore insert their keys; the
`--reuse` flag times them all on one long-lived runtime instead.
Usage: python bench.py [REPEATS] [--reuse]
"""
import json
import statistics
import sys
import time

import car_runtime as car


def noop(call_json):
    return "{}"


def runtime():
    rt = car.CarRuntime()
    rt.register_tool("noop")
    return rt


def run(rt, actions, repeats, reuse):
    text = json.dumps({"actions": actions})
    rt.execute_proposal(text, noop)  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        if not reuse:
            rt = runtime()
        t0, c0 = time.perf_counter(), time.thread_time()
        out = rt.execute_proposal(text, noop)
        c1, t1 = time.thread_time(), time.perf_counter()
        wall.append((t1 - t0) * 1e6 / len(actions))
        cpu.append((c1 - c0) * 1e6 / len(actions))
    assert json.loads(out)["cost"]["actions_executed"] == len(actions)
    return min(wall), statistics.median(wall), min(cpu), statistics.median(cpu)


def fixed_cost(rt, repeats):
    """Microseconds per execute_proposal call of a one-action proposal."""
    text = json.dumps({"actions": [{"id": "a", "type": "tool_call", "tool": "noop"}]})
    calls = 2_000
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            rt.execute_proposal(text, noop)
        t = (time.perf_counter() - t0) * 1e6 / calls
        best = t if best is None else min(best, t)
    return best


def main():
    args = [a for a in sys.argv[1:] if a != "--reuse"]
    reuse = "--reuse" in sys.argv[1:]
    repeats = int(args[0]) if args else 5
    rt = runtime()
    print(f"one-action proposal: best {fixed_cost(rt, repeats):6.2f} us per execute_proposal call")
    for n in (1_000, 10_000):
        shapes = {
            "independent tool calls": [{"id": f"a{i}", "type": "tool_call", "tool": "noop"} for i in range(n)],
            "chained tool calls": [
                {"id": f"c{i}", "type": "tool_call", "tool": "noop", "dependencies": [f"c{i-1}"] if i else []}
                for i in range(n)
            ],
            "state_write actions": [
                {"id": f"w{i}", "type": "state_write", "parameters": {"key": f"k{i}", "value": i}} for i in range(n)
            ],
        }
        for name, actions in shapes.items():
            wall, wall_med, cpu, cpu_med = run(rt, actions, repeats, reuse)
            print(
                f"{n:>6} {name:<23} wall best {wall:6.2f} median {wall_med:6.2f}"
                f" | thread CPU best {cpu:6.2f} median {cpu_med:6.2f}  us/action"
            )


if __name__ == "__main__":
    main()
