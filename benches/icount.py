#!/usr/bin/env python3
"""Instruction counts of the hot paths, checked against a baseline.

Runs each case of examples/icount.rs once under callgrind (collecting only
inside its `measured` function, so building the inputs is not counted) and
compares the instruction count with benches/icount/baseline.json. A count
more than 10% over its baseline fails (exit 1); instruction counts do not
depend on the machine's load, so this catches a slowdown a noisy CI timer
would not. A count far below its baseline is reported (update the baseline
to keep the check tight).

    benches/icount.py [--bin PATH] [--update] [--tolerance 0.10] [CASE...]

--bin: the icount example (default target/$CARGO_BUILD_TARGET/debug/examples/icount,
which `cargo build --all-targets` makes; scripts/test uses it). The
baseline is per build profile: counts of a debug build are checked against
the "debug" entries, of a release build against "release".
--update: write the measured counts into the baseline instead of checking.
Counts depend on the compiler version too: after a toolchain upgrade, run
with --update and commit the new baseline.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = os.path.join(ROOT, "benches", "icount", "baseline.json")


def count(binary, case):
    with tempfile.TemporaryDirectory(prefix="car-icount-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=icount::measured*",
               f"--callgrind-out-file={out}", binary, case]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{case}: callgrind failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s*(\d+)", line)
                if m:
                    n = int(m.group(1))
                    if n == 0:
                        raise SystemExit(f"{case}: nothing was collected (is `measured` inlined?)")
                    return n
    raise SystemExit(f"{case}: no instruction total in the callgrind output")


def main():
    target = os.environ.get("CARGO_BUILD_TARGET", "")
    default_bin = os.path.join(ROOT, "target", target, "debug", "examples", "icount")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=default_bin)
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        raise SystemExit(f"{a.bin} does not exist; build it with `cargo build --example icount`")
    profile = "release" if f"{os.sep}release{os.sep}" in a.bin else "debug"
    cases = a.cases or subprocess.run([a.bin, "list"], capture_output=True, text=True, check=True).stdout.split()
    baseline = {}
    if os.path.exists(BASELINE):
        with open(BASELINE) as f:
            baseline = json.load(f)
    base = baseline.get(profile, {})
    failed = []
    print(f"{'case':<24} {'instructions':>14} {'baseline':>14} {'ratio':>7}")
    for case in cases:
        n = count(a.bin, case)
        b = base.get(case)
        ratio = n / b if b else None
        note = ""
        if a.update:
            base[case] = n
        elif b is None:
            note = "  no baseline"
            failed.append(case)
        elif ratio > 1 + a.tolerance:
            note = f"  FAIL: more than {a.tolerance:.0%} over the baseline"
            failed.append(case)
        elif ratio < 1 - a.tolerance:
            note = "  (well under the baseline: consider --update)"
        print(f"{case:<24} {n:>14,} {b or 0:>14,} {ratio or 0:>7.3f}{note}")
    if a.update:
        baseline[profile] = dict(sorted(base.items()))
        with open(BASELINE, "w") as f:
            json.dump(baseline, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"wrote {BASELINE} ({profile})")
        return 0
    if failed:
        print(f"instruction counts over the baseline (or without one): {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
