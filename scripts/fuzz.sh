#!/usr/bin/env bash
# Builds the libFuzzer targets and runs each one for a fixed time.
#
#   scripts/fuzz.sh [SECONDS per target, default 60]
#
# Target fuzz_NAME starts from a temporary copy of fuzz/corpus/NAME, so a run
# never adds files to the repository. Logs go to BUILD/fuzz-logs/, crash
# reproducers to BUILD/fuzz-artifacts/NAME/ (BUILD is build-fuzz, or
# $KVPEER_FUZZ_BUILD_DIR). Exits non-zero if any target crashed, leaked,
# timed out or ran out of memory.
set -euo pipefail

seconds=${1:-60}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS per target]" >&2
  exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${KVPEER_FUZZ_BUILD_DIR:-$root/build-fuzz}
"$root/scripts/setup.sh" --build-dir "$build_dir" --fuzz

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build_dir/fuzz-logs"

targets=()
for bin in "$build_dir"/fuzz/fuzz_*; do
  [ -f "$bin" ] && [ -x "$bin" ] && targets+=("$bin")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz.sh: no fuzz_* targets in $build_dir/fuzz" >&2
  exit 1
fi

failed=0
for bin in "${targets[@]}"; do
  name=$(basename "$bin")
  corpus="$work/$name"
  mkdir -p "$corpus"
  seeds="$root/fuzz/corpus/${name#fuzz_}"
  if [ -d "$seeds" ]; then cp -R "$seeds/." "$corpus/"; fi
  artifacts="$build_dir/fuzz-artifacts/$name"
  mkdir -p "$artifacts"
  log="$build_dir/fuzz-logs/$name.log"

  echo "fuzz.sh: $name for ${seconds}s ($(find "$corpus" -type f | wc -l) seed files)"
  rc=0
  "$bin" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz.sh: $name: ${execs:-?} executions, no crash"
  else
    echo "fuzz.sh: $name: FAILED (exit $rc) after ${execs:-?} executions; log $log, reproducers in $artifacts/" >&2
    tail -n 40 "$log" >&2
    failed=1
  fi
done
exit "$failed"
