#!/usr/bin/env bash
# Type checks of the Python package: mypy's stubtest (the .pyi stubs against
# the installed module: every name, signature and kind), then `mypy --strict`
# over an example program, which then runs (it must exit 0).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
PY="${PYTHON:-$ROOT/.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Run from a directory without the source tree, so the installed package is checked.
(cd "$tmp" && "$PY" -m mypy.stubtest car_runtime --allowlist "$OLDPWD/stubtest-allowlist.txt")
"$PY" -m mypy --strict --cache-dir "$tmp/cache" examples/typed_agent.py
(cd "$tmp" && "$PY" "$OLDPWD/examples/typed_agent.py")
