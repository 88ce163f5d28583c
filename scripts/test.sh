#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs
#   1. the libFuzzer targets for a bounded time (scripts/fuzz.sh),
#   2. every ctest suite under AddressSanitizer + UndefinedBehaviorSanitizer,
#   3. every ctest suite in the Release build (its summary ends the output).
# Any failure stops the run with a non-zero exit status.
#
#   scripts/test.sh            # everything (CI runs this)
#   FUZZ_SECONDS=10 scripts/test.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
fuzz_seconds=${FUZZ_SECONDS:-60}

echo "== fuzzing (${fuzz_seconds} s per target)"
scripts/fuzz.sh "$fuzz_seconds"

scripts/systemd-check.sh

echo "== ASan+UBSan build and tests"
scripts/setup.sh --build-dir build-asan --type Debug --sanitize
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -j2 --output-on-failure --timeout 600

echo "== Release build and tests"
scripts/setup.sh --build-dir build
ctest --test-dir build -j2 --output-on-failure --timeout 600
