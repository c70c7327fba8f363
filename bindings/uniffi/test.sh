#!/usr/bin/env bash
# Exercises the UniFFI binding through its generated sources: Python (run with
# the generated module) and Kotlin (compiled with kotlinc against JNA on the
# JDK and run). Installs what it needs: Debian's libjna-java, the npm package
# kotlin-compiler.
set -euo pipefail
cd "$(dirname "$0")"
bash ./generate.sh
GEN=$PWD/generated

echo "--> uniffi: the generated Swift surface matches the expectation"
python3 tests/swift_surface.py

echo "--> uniffi: python through the generated bindings"
PYTHONPATH="$GEN/python" python3 tests/python/test_uniffi.py
PYTHONPATH="$GEN/python" python3 tests/python/test_approvals.py
PYTHONPATH="$GEN/python" python3 tests/python/test_admission.py
PYTHONPATH="$GEN/python" python3 tests/python/test_hooks.py
PYTHONPATH="$GEN/python" python3 tests/python/test_planning.py
PYTHONPATH="$GEN/python" python3 tests/python/test_fetch.py

echo "--> uniffi: kotlin through the generated bindings"
JNA=/usr/share/java/jna.jar
if [ ! -f "$JNA" ]; then
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -q libjna-java >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q libjna-java >/dev/null; })
  fi
fi
[ -f "$JNA" ] || { echo "JNA not found at $JNA"; exit 1; }
KDIR=$PWD/.kotlin
if [ ! -x "$KDIR/node_modules/kotlin-compiler/bin/kotlinc" ]; then
  mkdir -p "$KDIR"
  (cd "$KDIR" && npm install --no-save --no-audit --no-fund --loglevel=error kotlin-compiler@2.4.20)
fi
KOTLINC="$KDIR/node_modules/kotlin-compiler/bin/kotlinc"
STDLIB=$(ls "$KDIR"/node_modules/kotlin-compiler/lib/kotlin-stdlib.jar)
BUILD=$PWD/.kotlin/build
rm -rf "$BUILD" && mkdir -p "$BUILD"
# The README's Kotlin example is compiled and run with the test (Main.kt calls it).
python3 - README.md "$BUILD/ReadmeExample.kt" <<'PY'
import re, sys
blocks = re.findall(r"```kotlin\n(.*?)```", open(sys.argv[1]).read(), re.S)
example = [b for b in blocks if "fun readmeExample" in b]
if len(example) != 1:
    sys.exit("README.md: expected one ```kotlin block defining readmeExample")
open(sys.argv[2], "w").write(example[0])
PY
"$KOTLINC" -nowarn -cp "$JNA" "$GEN"/kotlin/uniffi/car_runtime_uniffi/*.kt tests/kotlin/Main.kt "$BUILD/ReadmeExample.kt" -d "$BUILD/app.jar"
java -Djna.library.path="$GEN/python" -cp "$BUILD/app.jar:$JNA:$STDLIB" MainKt
