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
# The npm layout comes from bindings/node/stage.js. Cross linkers come from
# the package registries: `ziglang` (PyPI) for the wheels (maturin --zig,
# which also pins the glibc symbol versions to 2.17) and cargo-zigbuild
# (PyPI) + zig for the Node addons, built with `cargo zigbuild` for
# `<target>.2.17` on glibc targets (so they need glibc 2.17 at most, like
# the wheels; `napi build --cross-compile` passes no glibc version and got
# zig's default, 2.30) and with a dynamic C runtime on musl targets (a
# cdylib cannot link the static one). Every artifact is checked at the end:
# its ELF machine is the target's, a glibc one needs no symbol above
# GLIBC_2.17, a musl one needs no glibc at all. Artifacts for another
# architecture or libc cannot be loaded on this machine; the x86_64 glibc
# wheel and addon are installed and used by scripts/test
# (bindings/python/wheel-test.sh, bindings/node/pack-test.sh).
# Standard libraries for the other targets: `rustup target add TARGET`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST="${DIST:-$ROOT/dist}"
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
fi
unset CARGO_BUILD_TARGET # each build names its own target
# Its own artifacts: zig-linked release builds would replace the ones the
# test steps reuse.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/packages}"
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
  (cd bindings/python && maturin build --quiet --release --strip --target "$t" --zig --compatibility "$compat" \
    --out "$DIST/wheels")
  echo "==> node addon $t"
  case "$t" in
    x86_64-*-gnu) platform=linux-x64-gnu; zt="$t.2.17"; rf="" ;;
    aarch64-*-gnu) platform=linux-arm64-gnu; zt="$t.2.17"; rf="" ;;
    x86_64-*-musl) platform=linux-x64-musl; zt="$t"; rf="-C target-feature=-crt-static" ;;
    aarch64-*-musl) platform=linux-arm64-musl; zt="$t"; rf="-C target-feature=-crt-static" ;;
    *) skipped+=("$t: no npm platform name for it"); continue ;;
  esac
  CARGO_PROFILE_RELEASE_STRIP=symbols RUSTFLAGS="$rf" \
    cargo zigbuild --quiet --release --target "$zt" -p car-runtime-node
  mkdir -p "$DIST/npm/bin"
  cp "$CARGO_TARGET_DIR/$t/release/libcar_runtime_node.so" "$DIST/npm/bin/car-runtime.$platform.node"
  built+=("$t")
done

echo "==> npm packages"
stage="$DIST/npm/stage"
node bindings/node/stage.js "$stage" "$DIST/npm/bin"
(cd "$stage" && npm pack --silent --pack-destination "$DIST/npm" >/dev/null)
for sub in "$stage"/npm/*/; do
  [ -d "$sub" ] && (cd "$sub" && npm pack --silent --pack-destination "$DIST/npm" >/dev/null)
done

echo "==> checking every artifact's machine and libc"
python3 - "$DIST" <<'PY'
import pathlib, re, subprocess, sys, tempfile, zipfile
dist = pathlib.Path(sys.argv[1])
MACHINE = {"x86_64": "X86-64", "aarch64": "AArch64", "x64": "X86-64", "arm64": "AArch64"}
def check(name, data, arch, libc):
    with tempfile.NamedTemporaryFile() as t:
        t.write(data); t.flush()
        head = subprocess.run(["readelf", "-h", "-W", t.name], capture_output=True, text=True, check=True).stdout
        ver = subprocess.run(["readelf", "-V", "-W", t.name], capture_output=True, text=True, check=True).stdout
        dyn = subprocess.run(["readelf", "-d", "-W", t.name], capture_output=True, text=True, check=True).stdout
    machine = re.search(r"Machine:\s+(.*)", head).group(1).strip()
    assert MACHINE[arch] in machine, f"{name}: machine {machine}, expected {MACHINE[arch]}"
    glibc = sorted({tuple(map(int, v)) for v in re.findall(r"GLIBC_(\d+)\.(\d+)", ver)})
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", dyn)
    if libc == "gnu":
        assert glibc and glibc[-1] <= (2, 17), f"{name}: needs glibc {glibc[-1] if glibc else None}"
        floor = "glibc " + ".".join(map(str, glibc[-1]))
    else:
        assert not glibc and "libc.so.6" not in needed, f"{name}: links glibc ({needed})"
        floor = "musl (" + ", ".join(needed) + ")"
    print(f"  {name}: {machine}, {floor}, {len(data) / 1e6:.1f} MB")
for whl in sorted((dist / "wheels").glob("*.whl")):
    z = zipfile.ZipFile(whl)
    so = next(n for n in z.namelist() if n.endswith(".so"))
    arch = "aarch64" if "aarch64" in whl.name else "x86_64"
    check(whl.name, z.read(so), arch, "musl" if "musllinux" in whl.name else "gnu")
for node in sorted((dist / "npm" / "bin").glob("*.node")):
    _, plat, _ = node.name.split(".")
    _, cpu, libc = plat.split("-")
    check(node.name, node.read_bytes(), cpu, libc)
PY

echo
echo "built: ${built[*]:-(none)}"
for s in "${skipped[@]}"; do echo "NOT built: $s"; done
ls -la "$DIST/wheels" "$DIST/npm"/*.tgz
