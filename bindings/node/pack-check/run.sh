#!/usr/bin/env bash
# Runs check.cjs (CommonJS) and esm.js (as main.js of a "type": "module"
# package) against the car-runtime installed in DIR, with NODE (default
# `node`; scripts/try-foreign-packages.sh passes qemu-user and an aarch64
# Node.js). Used by pack-test.sh and scripts/try-foreign-packages.sh.
#
#   pack-check/run.sh DIR [NODE...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
shift
[ $# -gt 0 ] || set -- node
cp "$here/check.cjs" "$dir/"
(cd "$dir" && "$@" check.cjs)
mkdir -p "$dir/esm"
printf '{"name":"esm-probe","type":"module"}\n' >"$dir/esm/package.json"
cp "$here/esm.js" "$dir/esm/main.js"
(cd "$dir/esm" && "$@" main.js)
