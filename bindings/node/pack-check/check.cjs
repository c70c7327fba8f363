'use strict';
// Uses an installed car-runtime as a user would, from CommonJS. Copied into
// the directory the package was installed in and run there, by pack-test.sh
// (the x86_64 packages) and by scripts/try-foreign-packages.sh (a package
// for another architecture, under qemu-user), through run.sh. esm.js is its
// ES-module half.
const car = require('car-runtime');
const assert = require('node:assert/strict');

assert.equal(car.protocolVersion(), 3);
const rt = new car.CarRuntime();
rt.stateSet('k', '1');
assert.equal(rt.stateGet('k'), '1');
assert.equal(typeof car.executeProposal, 'function');
assert.throws(() => car.normalizeProposal('{'), (e) => e instanceof car.CarInputError && e.code === 'invalid_json');
const report = JSON.parse(car.verify(JSON.stringify({ actions: [{ id: 'w', type: 'state_write', parameters: { key: 'k', value: 1 } }] })));
assert.equal(report.valid, true);
console.log(`npm package on ${process.arch}: require("car-runtime") works (node ${process.version})`);
