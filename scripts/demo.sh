#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs kvpeerd.
# (Until the daemon lands this prints its version; the daemon issue turns it
# into the two-node demo that moves real blocks.)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" --build-dir "$root/build"
"$root/build/daemon/kvpeerd" --version
