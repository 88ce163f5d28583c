#!/usr/bin/env bash
# Line coverage of session/ by the session tests (gcc --coverage -O0).
# Usage: scripts/coverage.sh   (from anywhere; builds in <repo>/build-cov)
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build-cov -DCMAKE_BUILD_TYPE=Debug -DKVPEER_COVERAGE=ON
cmake --build build-cov -j2 --target session_tests
# Counters from an earlier run would inflate the figure.
find build-cov -name '*.gcda' -delete
./build-cov/tests/session_tests

lcov --capture --directory build-cov --output-file build-cov/cov.info
# session/ and tests/session/ (the pattern matches both) ...
lcov --extract build-cov/cov.info '*/session/*' -o build-cov/session.info
lcov --summary build-cov/session.info
# ... and the library sources alone, per file.
lcov --extract build-cov/cov.info "$PWD/session/*" -o build-cov/session_sources.info
lcov --list build-cov/session_sources.info
lcov --summary build-cov/session_sources.info
