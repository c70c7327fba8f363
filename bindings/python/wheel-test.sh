#!/usr/bin/env bash
# Builds the wheel, installs it into a fresh virtualenv and imports it from
# another directory.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$ROOT/.venv/bin/maturin" build --quiet --out "$tmp/dist" >/dev/null
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check "$tmp"/dist/*.whl
(cd "$tmp" && "$tmp/venv/bin/python" -c "
import json, car_runtime
assert car_runtime.protocol_version() == 3
rt = car_runtime.CarRuntime()
rt.register_tool('t')
out = json.loads(rt.execute_proposal({'actions': [{'id': 'a', 'type': 'tool_call', 'tool': 't'}]}, lambda c: {'ok': 1}))
assert out['results'][0]['output'] == {'ok': 1}
import pathlib; assert (pathlib.Path(car_runtime.__file__).parent / '__init__.pyi').exists()
print('wheel: installs into a fresh virtualenv and imports from another directory (with its .pyi stubs)')
")
