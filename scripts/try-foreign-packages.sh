#!/usr/bin/env bash
# Loads and uses the aarch64 glibc artifacts of scripts/build-packages.sh on
# this x86_64 machine, under qemu-user: the manylinux2014 aarch64 wheel in
# Debian's aarch64 CPython and the linux-arm64-gnu npm package (installed
# the way npm installs it, through the main package's optionalDependencies)
# in Debian's aarch64 Node.js. The checks are the ones the x86_64 packages
# pass (bindings/python/wheel_check.py, bindings/node/pack-check/).
#
#   scripts/try-foreign-packages.sh          (after build-packages.sh; DIST=dist)
#
# Needs: qemu-user (Debian), and an aarch64 root with python3.11 and nodejs
# unpacked from Debian's arm64 packages (made on first use under
# $CAR_ARM64_ROOT, default ~/.cache/car-runtime/arm64-root; it adds the
# arm64 architecture to dpkg to download them, and installs none of them).
# Then each binding's own test suite runs against them (the tests qemu-user
# cannot run are named below, with why). The musl artifacts are not
# loaded: Debian has no musl CPython or Node.js.
# Not part of scripts/test: the aarch64 release builds take about half an
# hour on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST="${DIST:-$ROOT/dist}"
ARM=${CAR_ARM64_ROOT:-$HOME/.cache/car-runtime/arm64-root}

whl=$(ls "$DIST"/wheels/*manylinux*aarch64*.whl 2>/dev/null | head -1 || true)
main_tgz=$(ls "$DIST"/npm/car-runtime-0*.tgz 2>/dev/null | head -1 || true)
arm_tgz=$(ls "$DIST"/npm/car-runtime-linux-arm64-gnu-*.tgz 2>/dev/null | head -1 || true)
for f in "$whl" "$main_tgz" "$arm_tgz"; do
  [ -n "$f" ] || { echo "no aarch64 glibc artifacts in $DIST: run scripts/build-packages.sh aarch64-unknown-linux-gnu" >&2; exit 1; }
done

if ! command -v qemu-aarch64 >/dev/null; then
  echo "==> installing qemu-user (Debian)"
  apt-get install -y -q qemu-user >/dev/null
fi

if [ ! -x "$ARM/usr/bin/python3.11" ] || [ ! -x "$ARM/usr/bin/node" ]; then
  echo "==> an aarch64 root with Debian's python3.11 and nodejs in $ARM"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
  fi
  apt-get update -q >/dev/null
  debs=$(mktemp -d)
  deps() { apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" | grep -E '^[a-z0-9]' | sort -u; }
  # arm64 libraries, and the architecture-independent JavaScript that
  # Debian's Node.js loads at start-up (node-acorn, node-cjs-module-lexer, ...)
  arch=$(deps python3.11:arm64 nodejs:arm64 libgcc-s1:arm64 | grep ':arm64$')
  js=$(deps nodejs:arm64 | grep '^node-')
  (cd "$debs" && apt-get download $arch $js >/dev/null 2>&1)
  rm -rf "$ARM" && mkdir -p "$ARM"
  for d in "$debs"/*.deb; do dpkg -x "$d" "$ARM"; done
  rm -rf "$debs"
  [ -x "$ARM/usr/bin/python3.11" ] && [ -x "$ARM/usr/bin/node" ] ||
    { echo "Debian's arm64 python3.11 and nodejs could not be downloaded into $ARM" >&2; exit 1; }
fi
run() { qemu-aarch64 -L "$ARM" "$@"; }

tmp=$(mktemp -d)
addon=bindings/node/car-runtime.linux-arm64-gnu.node
trap 'rm -rf "$tmp" "$addon"' EXIT

echo "==> $(basename "$whl") in aarch64 CPython $(run "$ARM/usr/bin/python3.11" -c 'import platform; print(platform.python_version())')"
mkdir "$tmp/site" "$tmp/py"
python3 -m zipfile -e "$whl" "$tmp/site"
cp bindings/python/wheel_check.py "$tmp/py/"
(cd "$tmp/py" && PYTHONPATH="$tmp/site" run "$ARM/usr/bin/python3.11" wheel_check.py)
# The binding's own test suite against the installed aarch64 wheel (pytest
# is pure Python). Left out, as qemu-user cannot run them: the sandbox tests
# (it does not emulate the user namespaces and Landlock the sandbox needs,
# so the sandbox refuses to run a command: its fail-closed path), tests that
# start `sys.executable` as a child (the kernel cannot execute an aarch64
# binary here without binfmt_misc), and the MCP tests (the MCP SDK and its
# servers are such children too).
echo "==> the Python binding's tests (pytest) on the aarch64 wheel"
python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp/pytest" \
  pytest==8.3.4 iniconfig==2.3.1 packaging==26.4 pluggy==1.7.0
for w in "$tmp"/pytest/*.whl; do python3 -m zipfile -e "$w" "$tmp/site"; done
(cd bindings/python && PYTHONPATH="$tmp/site" run "$ARM/usr/bin/python3.11" -m pytest -q -p no:cacheprovider tests \
  --ignore=tests/test_mcp.py --ignore=tests/test_mcp_http.py --ignore=tests/test_sandbox.py \
  --deselect tests/test_streaming.py::test_detached_tools_running_at_once_are_capped)

echo "==> $(basename "$main_tgz") + $(basename "$arm_tgz") in aarch64 Node.js $(run "$ARM/usr/bin/node" -p process.version)"
# --force: npm refuses a package for another CPU even when told --cpu.
mkdir "$tmp/npm"
(cd "$tmp/npm" && npm init -y >/dev/null &&
  npm install --offline --no-audit --no-fund --loglevel=error --os=linux --cpu=arm64 --libc=glibc --force \
    "$main_tgz" "$arm_tgz" >/dev/null)
ls "$tmp/npm/node_modules" | grep -qx car-runtime-linux-arm64-gnu
bindings/node/pack-check/run.sh "$tmp/npm" qemu-aarch64 -L "$ARM" "$ARM/usr/bin/node"
# The binding's own tests against the aarch64 addon (taken from the
# platform package), each file in one process of its own: the test
# runner's `--test` starts its files as children, which the kernel cannot
# execute here. Left out for the same reasons as the Python ones:
# sandbox.test.js (qemu-user), esm.test.js (it starts `process.execPath`).
# Two tests may fail here and are reported, not counted: the README example
# of typed.test.js starts `process.execPath` too, and the batching test
# that counts event-loop ticks during a built-in's work times an event
# loop that qemu emulates. Any other failure fails the script.
echo "==> the Node binding's tests on the aarch64 addon"
tar -xzOf "$arm_tgz" package/car-runtime.linux-arm64-gnu.node >"$addon"
emulated='^not ok [0-9]+ - (the README example of errors, ES modules and types runs as written|built-in tools finish on the blocking pool while the event loop runs)'
failed=0
for f in bindings/node/test/*.test.js; do
  case "$f" in */sandbox.test.js | */esm.test.js) continue ;; esac
  out=$(cd bindings/node && run "$ARM/usr/bin/node" "test/$(basename "$f")" 2>&1) || true
  echo "  $(basename "$f"): $(grep -E '^# (pass|fail) ' <<<"$out" | tr '\n' ' ')"
  grep -qE '^# pass [1-9]' <<<"$out" || { echo "    no test passed" >&2; failed=1; }
  while IFS= read -r line; do
    if [[ "$line" =~ $emulated ]]; then echo "    (not counted under qemu) $line"; else echo "    $line" >&2; failed=1; fi
  done < <(grep -E '^not ok' <<<"$out")
done
[ "$failed" = 0 ] || { echo "a Node test failed on aarch64" >&2; exit 1; }
echo "aarch64 glibc packages: the wheel and the npm package pass their checks and their binding's tests under qemu-user"
