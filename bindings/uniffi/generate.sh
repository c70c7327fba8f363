#!/usr/bin/env bash
# Generates the Swift, Kotlin and Python sources of the UniFFI binding from
# the built library (library mode) into bindings/uniffi/generated/ (git-ignored).
# Fails when the build or any generation fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET_DIR="target/${CARGO_BUILD_TARGET:-}"
TARGET_DIR="${TARGET_DIR%/}"
cargo build -p car-runtime-uniffi -p uniffi-bindgen
LIB="$TARGET_DIR/debug/libcar_runtime_uniffi.so"
BINDGEN="$TARGET_DIR/debug/uniffi-bindgen"
OUT=bindings/uniffi/generated
rm -rf "$OUT"
for lang in python kotlin swift; do
  "$BINDGEN" generate "$LIB" --language "$lang" --out-dir "$OUT/$lang" --no-format
done
cp "$LIB" "$OUT/python/"
echo "generated: $(find "$OUT" -type f | wc -l) files in $OUT"
