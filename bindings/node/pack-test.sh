#!/usr/bin/env bash
# `npm pack` the built package and require('car-runtime') from another directory.
set -euo pipefail
cd "$(dirname "$0")"
tgz=$(npm pack --silent 2>/dev/null | tail -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$PWD/$tgz"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error "$OLDPWD/$tgz" >/dev/null)
(cd "$tmp" && node -e "
const car = require('car-runtime');
const assert = require('node:assert/strict');
assert.equal(car.protocolVersion(), 3);
const rt = new car.CarRuntime();
rt.stateSet('k', '1');
assert.equal(rt.stateGet('k'), '1');
assert.equal(typeof car.executeProposal, 'function');
console.log('npm pack: require(\"car-runtime\") works from another directory');
")
