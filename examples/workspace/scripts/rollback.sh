#!/bin/sh
# Compensation of deploy.sh: takes the deployed version down again.
rm -f deployed/current
echo "rolled back $1"
