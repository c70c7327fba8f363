#!/usr/bin/env bash
# Takes a PNG of every dashboard page into docs/img/ by running the browser
# test (tests/server/test_dashboard.py) with CAR_DASHBOARD_SHOTS set: the
# pages are the ones the test drives, with the data it submits.
# Needs chromium + chromedriver (Debian) and selenium (PyPI), as scripts/test installs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_BUILD_TARGET="${CARGO_BUILD_TARGET:-x86_64-unknown-linux-gnu}"
cargo build --features server --bin car-server
PY="${PYTHON:-$ROOT/.venv/bin/python}"
"$PY" -m pip install --quiet --disable-pip-version-check websockets pytest "selenium==4.*"
mkdir -p docs/img
cd tests/server
CAR_SERVER_BIN="$ROOT/target/$CARGO_BUILD_TARGET/debug/car-server" CAR_SERVER_URL=ws://127.0.0.1:1 CAR_SERVER_TOKEN=unused \
  CAR_DASHBOARD_SHOTS="$ROOT/docs/img" "$PY" -m pytest -q -p no:cacheprovider test_dashboard.py
ls -1 "$ROOT"/docs/img/dashboard-*.png
