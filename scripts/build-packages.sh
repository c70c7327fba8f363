#!/usr/bin/env bash
# Release build matrix: Python wheels (manylinux2014 for glibc targets,
# musllinux_1_2 for musl targets; abi3, one wheel per platform) and the npm
# packages (the main `car-runtime` package plus one `car-runtime-<platform>`
# package per target, wired through optionalDependencies), stripped, into
# dist/. Each target needs its Rust standard library (`rustup target list
# --installed`); one that is missing is reported and skipped, never faked.
#
#   scripts/build-packages.sh [TARGET...]   (default: the four Linux targets)
#
# The npm layout comes from bindings/node/stage.js. Cross linkers come from the package registries: `ziglang` (PyPI) for the
# wheels (maturin --zig, which also pins the glibc symbol versions to 2.17)
# and cargo-zigbuild (PyPI) + zig for the napi builds (`napi build
# --cross-compile`). napi's `--use-napi-cross` (the `@napi-rs/cross-toolchain`
# gcc) failed here with "Cannot find native binding". Measured here: the
# wheel's extension needs at most GLIBC_2.17; a `napi build --cross-compile`
# addon for x86_64-unknown-linux-gnu needed GLIBC_2.30 (zig's default glibc,
# napi passes no `.2.17` suffix), so the npm glibc packages are not yet
# manylinux2014-equivalent.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST="${DIST:-$ROOT/dist}"
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
fi
unset CARGO_BUILD_TARGET # each build names its own target
mkdir -p "$DIST/wheels" "$DIST/npm"
installed=$(rustup target list --installed)

if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install --quiet --disable-pip-version-check maturin ziglang cargo-zigbuild
export PATH="$ROOT/.venv/bin:$PATH"
(cd bindings/node && { npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error; })

built=()
skipped=()
for t in "${TARGETS[@]}"; do
  if ! grep -qx "$t" <<<"$installed"; then
    skipped+=("$t: the Rust standard library for it is not installed (rustup target add $t)")
    continue
  fi
  case "$t" in
    *-musl) compat=musllinux_1_2 ;;
    *) compat=manylinux2014 ;;
  esac
  echo "==> wheel $t ($compat)"
  (cd bindings/python && maturin build --release --strip --target "$t" --zig --compatibility "$compat" --out "$DIST/wheels")
  echo "==> napi $t"
  (cd bindings/node && npx --no-install napi build --platform --release --strip --target "$t" --cross-compile \
    --output-dir "$DIST/npm/bin")
  built+=("$t")
done

echo "==> npm packages"
stage="$DIST/npm/stage"
node bindings/node/stage.js "$stage" "$DIST/npm/bin"
(cd "$stage" && npm pack --silent --pack-destination "$DIST/npm" >/dev/null)
for sub in "$stage"/npm/*/; do
  [ -d "$sub" ] && (cd "$sub" && npm pack --silent --pack-destination "$DIST/npm" >/dev/null)
done

echo
echo "built: ${built[*]:-(none)}"
for s in "${skipped[@]}"; do echo "NOT built: $s"; done
ls -la "$DIST/wheels" "$DIST/npm"/*.tgz
