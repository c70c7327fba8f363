'use strict';
// Stages the npm packages for publishing: the main `car-runtime` package
// without a binary, depending through optionalDependencies on one
// `car-runtime-<platform>` package per built binary (npm installs the one
// whose os/cpu/libc match). Used by scripts/build-packages.sh and
// pack-test.sh.
//
//   node stage.js STAGE_DIR BIN_DIR   (BIN_DIR holds car-runtime.<platform>.node files)
const fs = require('node:fs');
const path = require('node:path');

const PLATFORMS = {
  'linux-x64-gnu': { os: ['linux'], cpu: ['x64'], libc: ['glibc'] },
  'linux-arm64-gnu': { os: ['linux'], cpu: ['arm64'], libc: ['glibc'] },
  'linux-x64-musl': { os: ['linux'], cpu: ['x64'], libc: ['musl'] },
  'linux-arm64-musl': { os: ['linux'], cpu: ['arm64'], libc: ['musl'] },
};

function stage(stageDir, binDir) {
  const here = __dirname;
  const pkg = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8'));
  fs.rmSync(stageDir, { recursive: true, force: true });
  fs.mkdirSync(stageDir, { recursive: true });
  const files = pkg.files.filter((f) => f !== '*.node');
  for (const f of files) fs.copyFileSync(path.join(here, f), path.join(stageDir, f));
  const optional = {};
  const packages = [];
  for (const [platform, fields] of Object.entries(PLATFORMS)) {
    const node = `car-runtime.${platform}.node`;
    const from = path.join(binDir, node);
    if (!fs.existsSync(from)) continue; // not built: no package, no dependency on it
    const name = `car-runtime-${platform}`;
    const dir = path.join(stageDir, 'npm', platform);
    fs.mkdirSync(dir, { recursive: true });
    fs.copyFileSync(from, path.join(dir, node));
    for (const f of ['LICENSE-MIT', 'LICENSE-APACHE']) fs.copyFileSync(path.join(here, f), path.join(dir, f));
    const sub = {
      name,
      version: pkg.version,
      description: `${pkg.name}'s native addon for ${platform}.`,
      main: node,
      files: [node, 'LICENSE-MIT', 'LICENSE-APACHE'],
      license: pkg.license,
      author: pkg.author,
      keywords: pkg.keywords,
      engines: pkg.engines,
      ...fields,
    };
    fs.writeFileSync(path.join(dir, 'package.json'), `${JSON.stringify(sub, null, 2)}\n`);
    optional[name] = pkg.version;
    packages.push(dir);
  }
  const main = { ...pkg, files, optionalDependencies: optional };
  delete main.devDependencies;
  delete main.scripts;
  fs.writeFileSync(path.join(stageDir, 'package.json'), `${JSON.stringify(main, null, 2)}\n`);
  return { main: stageDir, packages, optional };
}

if (require.main === module) {
  const [stageDir, binDir] = process.argv.slice(2);
  if (!stageDir || !binDir) {
    console.error('usage: node stage.js STAGE_DIR BIN_DIR');
    process.exit(2);
  }
  const out = stage(path.resolve(stageDir), path.resolve(binDir));
  console.log(`optionalDependencies: ${Object.keys(out.optional).join(', ') || '(none)'}`);
}

module.exports = { stage, PLATFORMS };
