#!/usr/bin/env bash
# Builds car-server, starts it on a free port with a known token, runs the
# Python client suite against it (pytest + websockets), and stops it.
# Usage: tests/server/run.sh [pytest args]   (PYTHON=path/to/venv/python)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY="${PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PY" ]; then
  python3 -m venv "$ROOT/.venv"
  PY="$ROOT/.venv/bin/python"
fi
"$PY" -m pip install --quiet --disable-pip-version-check websockets pytest

# CAR_SERVER_BIN may name an already built binary (scripts/test builds it
# with the workspace); otherwise build it here.
if [ -z "${CAR_SERVER_BIN:-}" ] || [ ! -x "$CAR_SERVER_BIN" ]; then
  cargo build --features server --bin car-server
  CAR_SERVER_BIN="$ROOT/target/${CARGO_BUILD_TARGET:+$CARGO_BUILD_TARGET/}debug/car-server"
fi
export CAR_SERVER_BIN

mkdir -p "$ROOT/target/tmp"
WORK=$(mktemp -d "$ROOT/target/tmp/car-server-test.XXXXXX")
LOG="$WORK/car-server.log"
export CAR_SERVER_TOKEN="test-token-$(date +%s)-$$"
export CAR_SERVER_MAX_FRAME=65536
# The shared daemon takes many wrong tokens from 127.0.0.1 across the suite:
# its failed-auth limit is raised (test_roles.py checks the default on its own daemons).
CAR_HOME="$WORK/home" CAR_AUTH_TOKEN="$CAR_SERVER_TOKEN" CAR_TOOL_TIMEOUT=2 CAR_AUTH_MAX_FAILURES=1000 \
  "$CAR_SERVER_BIN" --port 0 --max-frame-bytes "$CAR_SERVER_MAX_FRAME" 2>"$LOG" &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

for _ in $(seq 1 200); do
  URL=$(sed -n 's/.*listening on \(ws:\/\/[^ ]*:[0-9][0-9]*\/\) .*/\1/p' "$LOG" | head -1)
  [ -n "$URL" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.05
done
[ -n "${URL:-}" ] || { echo "car-server did not start"; cat "$LOG"; exit 1; }
export CAR_SERVER_URL="${URL%/}"

status=0
(cd tests/server && "$PY" -m pytest -q -p no:cacheprovider "$@" test_server.py test_faults.py test_roles.py test_admission_conformance.py test_stores.py test_suspend.py test_streaming.py test_isolation.py test_runs.py test_approvals.py test_webhooks.py test_dashboard.py) || status=$?
if ! kill -0 "$PID" 2>/dev/null; then
  echo "car-server died during the tests:"; cat "$LOG"; status=1
fi
if [ "$status" -ne 0 ]; then echo "--- daemon log"; tail -50 "$LOG"; fi
exit "$status"
