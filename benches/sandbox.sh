#!/bin/sh
# p50 / p99 of a sandboxed `true` (workspace-write) against a plain spawn of
# `true`, interleaved in one release run, with what each part of the
# profile costs (docs/sandbox.md, "Cost"). Usage: benches/sandbox.sh [RUNS]
set -e
cd "$(dirname "$0")/.."
date -u
exec cargo run --quiet --release --example sandbox_bench -- "${1:-300}" --breakdown
