"""Speed of the Python binding (a script, not a test): per-action cost of
execute_proposal with a no-op Python tool for 10,000 tool calls (independent
and as a chain) and 10,000 state writes, and per-action cost at 1,000 vs
10,000 actions. Build a release wheel first for real figures."""
import json
import time

import car_runtime as car


def run(rt, actions):
    text = json.dumps({"actions": actions})
    rt.execute_proposal(text, lambda call_json: "{}")  # warm-up
    t0 = time.perf_counter()
    rt.execute_proposal(text, lambda call_json: "{}")
    return (time.perf_counter() - t0) * 1e6 / len(actions)


def main():
    rt = car.CarRuntime()
    rt.register_tool("noop")
    for n in (1_000, 10_000):
        wide = [{"id": f"a{i}", "type": "tool_call", "tool": "noop"} for i in range(n)]
        chain = [{"id": f"c{i}", "type": "tool_call", "tool": "noop", "dependencies": [f"c{i-1}"] if i else []} for i in range(n)]
        writes = [{"id": f"w{i}", "type": "state_write", "parameters": {"key": f"k{i}", "value": i}} for i in range(n)]
        print(f"{n:>6} independent tool calls: {run(rt, wide):7.2f} us/action")
        print(f"{n:>6} chained tool calls:     {run(rt, chain):7.2f} us/action")
        print(f"{n:>6} state_write actions:    {run(rt, writes):7.2f} us/action")


if __name__ == "__main__":
    main()
