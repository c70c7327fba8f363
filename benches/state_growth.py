#!/usr/bin/env python3
"""Per-action cost of state writes on one long-lived runtime, 1,000 against
10,000 a run, with the event log growing and with it held to a size (not a
test; builds nothing).

Issue #21's target: 10,000 state writes cost per action within 1.2x of
1,000 on a long-lived runtime. `benches/compare.py --only exec` reports the
ratio beside the original; this script separates the two things that make
it: the size of one run (10,000 actions, their results and events against
1,000) and the event log growing across runs (`--max-events` holds it).

usage: .venv/bin/python benches/state_growth.py [--runs-1k 120] [--runs-10k 12]
                                                 [--max-events 3000]
Prints, for each size, with the log unbounded and held to --max-events:
the best and median microseconds per action (the first two runs are warm-up)
and the events the runtime holds at the end.
"""

import argparse
import json
import statistics
import time

import car_runtime


def writes(n):
    actions = [{"id": f"w{i}", "type": "state_write", "parameters": {"key": f"k{i}", "value": i}} for i in range(n)]
    return json.dumps({"actions": actions})


def noop(tool, params_json):
    return "{}"


def measure(n, runs, max_events):
    rt = car_runtime.CarRuntime()
    rt.register_tool("noop")
    if max_events:
        rt.event_retention(json.dumps({"max_events": max_events}))
    text = writes(n)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        rt.execute_proposal(text, noop)
        times.append(time.perf_counter() - t0)
    times = times[2:]
    return min(times) / n * 1e6, statistics.median(times) / n * 1e6, rt.event_count()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-1k", type=int, default=120)
    ap.add_argument("--runs-10k", type=int, default=12)
    ap.add_argument("--max-events", type=int, default=3000)
    args = ap.parse_args()
    if min(args.runs_1k, args.runs_10k) < 3:
        ap.error("at least 3 runs of each size (the first two are warm-up)")
    rows = {}
    for limit in (None, args.max_events):
        for n, runs in ((1000, args.runs_1k), (10000, args.runs_10k)):
            best, median, held = measure(n, runs, limit)
            rows[(limit, n)] = best
            label = "unbounded" if limit is None else f"max_events {limit}"
            print(f"{n:>6,} writes, log {label:<16} best {best:.3f} us/action, median {median:.3f}, {held:,} events held")
    for limit in (None, args.max_events):
        label = "unbounded" if limit is None else f"max_events {limit}"
        print(f"10k / 1k per action, log {label}: {rows[(limit, 10000)] / rows[(limit, 1000)]:.2f}x")


if __name__ == "__main__":
    main()
