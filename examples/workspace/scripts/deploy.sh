#!/bin/sh
# Deploys a version by copying its release file to deployed/current.
set -e
version="$1"
mkdir -p deployed
cp "dist/app-$version.txt" deployed/current
echo "deployed $version"
