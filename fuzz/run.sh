#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each, one at a time.
#   fuzz/run.sh [SECONDS] [target...]
# Needs cargo-fuzz (`cargo install cargo-fuzz`); on a stable toolchain the
# sanitizer flags need RUSTC_BOOTSTRAP=1, which this script sets.
# Corpora grow in fuzz/corpus/<target>; crashes land in fuzz/artifacts/<target>.
# CAR_FUZZ_BUILD_FLAGS adds cargo-fuzz build flags: scripts/test's smoke run uses
# "--dev -s none" (an unoptimised build without AddressSanitizer: about a
# quarter of the build time, with overflow checks on); long runs use the
# default (optimised, AddressSanitizer).
set -uo pipefail
cd "$(dirname "$0")"
secs="${1:-10}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(ir_parse policy_file shell_match shell_reference rpc_frame rpc_session facade_call); fi
export RUSTC_BOOTSTRAP=1
python3 make_seeds.py
status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t"
  echo "==> fuzz $t for ${secs}s"
  # shellcheck disable=SC2086
  if ! cargo fuzz run ${CAR_FUZZ_BUILD_FLAGS:-} "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$secs" -max_len=16384 -rss_limit_mb=4096 -timeout=20 -print_final_stats=1; then
    echo "fuzz target $t FAILED (see fuzz/artifacts/$t)"
    status=1
  fi
done
exit $status
