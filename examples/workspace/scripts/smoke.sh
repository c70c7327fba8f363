#!/bin/sh
# Smoke test of what is deployed: the release file must name the version.
set -e
grep -q "version $1" deployed/current
echo "smoke test passed for $1"
