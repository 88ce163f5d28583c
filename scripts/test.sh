#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs
#   0. the hygiene gates (scripts/check_hygiene.sh: clang-format, file sizes,
#      flake8, clang-tidy's function size), before anything is built,
#   1. the libFuzzer targets for a bounded time (scripts/fuzz.sh),
#   2. every ctest suite but the soak, the cluster and the bench under
#      AddressSanitizer + UndefinedBehaviorSanitizer (built with clang),
#   3. the session and daemon suites under ThreadSanitizer (built with clang),
#   4. in the Release build (GCC), only the binaries (kvpeerd, kvpeerctl, the
#      client library, kvpeer-bench) and what needs the shipped binary's
#      speed: the cluster tests with their figures printed, then the soak and
#      the bench's CI guards (bench_smoke), and base_tests (its NDEBUG case).
#      Every other suite ran once, in 2.
# Any failure stops the run with a non-zero exit status.
#
# Why the sanitizer builds use clang and the Release stage builds one test suite:
# CI's budget (README.md, "CI time").
#
#   scripts/test.sh            # everything (CI runs this)
#   FUZZ_TOTAL_SECONDS=30 scripts/test.sh   # fuzzing budget, all targets (default 90)
#   FUZZ_SECONDS=10 scripts/test.sh         # or a fixed time per target
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
echo "== hygiene gates"
scripts/setup.sh --build-dir build --configure-only
scripts/check_hygiene.sh build

if [ -n "${FUZZ_SECONDS:-}" ]; then
  echo "== fuzzing (${FUZZ_SECONDS} s per target)"
  scripts/fuzz.sh "$FUZZ_SECONDS"
else
  echo "== fuzzing (${FUZZ_TOTAL_SECONDS:-90} s in all)"
  scripts/fuzz.sh --total "${FUZZ_TOTAL_SECONDS:-90}"
fi

scripts/systemd-check.sh

echo "== ASan+UBSan build and tests"
scripts/setup.sh --build-dir build-asan --type Debug --sanitize --clang
# The soak and the bench run once, in Release (the cluster tests exist only there).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -j2 --output-on-failure --timeout 600 -LE "soak|bench"

echo "== ThreadSanitizer build and tests (session, daemon)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DKVPEER_TSAN=ON -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-tsan -j2 --target session_tests daemon_api_tests daemon_metrics_tests daemon_node_tests daemon_control_tests daemon_peer_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan -j2 -R "session_tests|daemon_[a-z]+_tests" --output-on-failure --timeout 600

echo "== Release build (the binaries) and the Release-only tests"
# base_tests too: it holds the one behaviour that exists only without
# assertions (a StatusOr built from an ok Status, tests/base/status_or_test.cc).
scripts/setup.sh --build-dir build --target kvpeerd --target kvpeerctl --target kvpeer_client --target kvpeer-bench \
  --target base_tests
# The cluster tests (label cluster, tests/cluster) first, then their figures,
# so that the full run's summary still ends the output.
rm -f build/cluster-figures.jsonl
ctest --test-dir build -j2 --output-on-failure --timeout 900 -L cluster
echo "== cluster figures (tests/cluster)"
if [ -s build/cluster-figures.jsonl ]; then
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    f = json.loads(line)
    print(("  %-46s %s %s" % (f["figure"], f["value"], f["unit"])).rstrip())' build/cluster-figures.jsonl
else
  echo "  (none: the cluster tests were skipped)"
fi
ctest --test-dir build -j2 --output-on-failure --timeout 600 -R "^base_tests:"
ctest --test-dir build -j2 --output-on-failure --timeout 600 -L "soak|bench"
