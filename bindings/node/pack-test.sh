#!/usr/bin/env bash
# The npm packages as users get them, each installed into a fresh directory:
# 1. `npm pack` of this package (binary included), required from CommonJS and
#    imported from an ES module package ("type": "module");
# 2. the publishing layout (bindings/node/stage.js): the main package without
#    a binary plus the platform package it names in optionalDependencies,
#    installed from the two tarballs (offline: nothing comes from a registry).
# Both carry LICENSE-MIT and LICENSE-APACHE.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npm pack --silent --pack-destination "$tmp" >/dev/null
tgz=$(ls "$tmp"/car-runtime-*.tgz)
listing=$(tar -tzf "$tgz")
for f in LICENSE-MIT LICENSE-APACHE index.mjs types.d.ts lib.d.ts README.md; do
  grep -qx "package/$f" <<<"$listing" || { echo "the npm package lacks $f" >&2; exit 1; }
done

check() { # DIR: require and import the installed package
  pack-check/run.sh "$1"
}

mkdir "$tmp/plain"
(cd "$tmp/plain" && npm init -y >/dev/null && npm install --offline --no-audit --no-fund --loglevel=error "$tgz" >/dev/null)
check "$tmp/plain"
echo 'npm pack: require("car-runtime") and import { ... } from "car-runtime" work from another directory'

node=$(ls car-runtime.*.node | head -1)
mkdir "$tmp/bin" && cp "$node" "$tmp/bin/"
node stage.js "$tmp/stage" "$tmp/bin" >/dev/null
mkdir "$tmp/split"
(cd "$tmp/stage" && npm pack --silent --pack-destination "$tmp/split" >/dev/null)
for sub in "$tmp"/stage/npm/*/; do (cd "$sub" && npm pack --silent --pack-destination "$tmp/split" >/dev/null); done
main_tgz=$(ls "$tmp"/split/car-runtime-0*.tgz)
if grep -q '\.node$' <<<"$(tar -tzf "$main_tgz")"; then echo "the main package must not carry a binary" >&2; exit 1; fi
mkdir "$tmp/split-install"
(cd "$tmp/split-install" && npm init -y >/dev/null &&
  npm install --offline --no-audit --no-fund --loglevel=error "$tmp"/split/*.tgz >/dev/null)
check "$tmp/split-install"
grep -q '^car-runtime-linux-' <<<"$(ls "$tmp/split-install/node_modules")"
echo "npm publishing layout: the main package and its platform package ($(basename "$node")) install and load"
