#!/usr/bin/env bash
# Builds the wheel, checks what it carries (licence files, metadata, stubs,
# stripped library), installs it into a fresh virtualenv and uses it from
# another directory (wheel_check.py: the JSON-text API, a coroutine tool under
# execute_proposal_obj_async, verify, and a pickled error).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# manylinux2014 (glibc 2.17): zig (PyPI `ziglang`) links against glibc 2.17's
# symbols, so the wheel installs on any x86_64 Linux with glibc 2.17 or
# later. Its own target directory: the zig-linked artifacts would otherwise
# replace the ones every other step reuses.
CARGO_TARGET_DIR="$ROOT/target/wheel-manylinux" PATH="$ROOT/.venv/bin:$PATH" \
  "$ROOT/.venv/bin/maturin" build --quiet --zig --compatibility manylinux2014 \
  --target x86_64-unknown-linux-gnu --out "$tmp/dist" >/dev/null
whl=$(ls "$tmp"/dist/*.whl)
case "$whl" in
  *manylinux_2_17_x86_64*) ;;
  *) echo "the wheel is not tagged manylinux_2_17: $whl" >&2; exit 1 ;;
esac
python3 - "$whl" <<'PY'
import subprocess, sys, tempfile, zipfile
whl = zipfile.ZipFile(sys.argv[1])
names = whl.namelist()
def one(suffix):
    hits = [n for n in names if n.endswith(suffix)]
    assert hits, f"the wheel has no {suffix}: {names}"
    return hits[0]
for lic in ("LICENSE-MIT", "LICENSE-APACHE"):
    one(f".dist-info/licenses/{lic}")
meta = whl.read(one(".dist-info/METADATA")).decode()
for want in ("License-Expression: MIT OR Apache-2.0", "License-File: LICENSE-MIT", "License-File: LICENSE-APACHE",
             "Description-Content-Type: text/markdown", "Classifier: Typing :: Typed", "# car-runtime for Python"):
    assert want in meta, f"METADATA lacks {want!r}"
for f in ("car_runtime/__init__.pyi", "car_runtime/py.typed", "car_runtime/_errors.py", "car_runtime/_aio.py", "car_runtime/_types.py"):
    one(f)
so = one(".abi3.so")
with tempfile.NamedTemporaryFile(suffix=".so") as t:
    t.write(whl.read(so)); t.flush()
    sections = subprocess.run(["readelf", "-S", "-W", t.name], capture_output=True, text=True, check=True).stdout
    assert ".symtab" not in sections, "the extension is not stripped"
    import re
    versions = subprocess.run(["readelf", "-V", "-W", t.name], capture_output=True, text=True, check=True).stdout
    glibc = sorted({tuple(map(int, v)) for v in re.findall(r"GLIBC_(\d+)\.(\d+)", versions)})
    assert glibc and glibc[-1] <= (2, 17), f"the extension needs glibc {glibc[-1]}, above manylinux2014's 2.17"
    print(f"wheel: manylinux2014, the extension needs glibc {'.'.join(map(str, glibc[-1]))} at most")
    print(f"wheel: {len(whl.read(so)) / 1e6:.1f} MB stripped extension, licences and metadata present")
PY
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check "$whl"
cp wheel_check.py "$tmp/"
(cd "$tmp" && "$tmp/venv/bin/python" wheel_check.py)
