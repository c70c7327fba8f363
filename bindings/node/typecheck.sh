#!/usr/bin/env bash
# `tsc --strict` over an example program that uses the typed API (IR and
# result interfaces, the *Obj variants, CarError subclasses), then runs the
# emitted JavaScript (it must exit 0). TypeScript is pinned in devDependencies.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The README's TypeScript example is checked and run the same way.
node -e '
const fs = require("node:fs");
const m = /<!-- readme-typescript -->\n```ts\n([\s\S]*?)```/.exec(fs.readFileSync("../../README.md", "utf8"));
if (!m) { console.error("README has no marked TypeScript example"); process.exit(1); }
fs.writeFileSync(process.argv[1], m[1]);
' "$PWD/examples/readme.ts"
trap 'rm -rf "$tmp" "$PWD/examples/readme.ts"' EXIT
npx --no-install tsc -p examples --strict --outDir "$tmp/out"
mkdir -p "$tmp/out/node_modules"
ln -s "$PWD" "$tmp/out/node_modules/car-runtime"
(cd "$tmp/out" && node typed.js && node readme.js)
