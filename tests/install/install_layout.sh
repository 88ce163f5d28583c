#!/usr/bin/env bash
# `cmake --install BUILD_DIR --prefix /usr` into a temporary DESTDIR, then
# checks the layout a Debian system expects (packaging/install.cmake):
# binaries executable and runnable, both units and the sysusers.d file
# byte-identical to systemd/, the units' ExecStart binary present, docs and
# the example config under /usr/share/doc/kvpeer, and nothing outside /usr.
#
#   tests/install/install_layout.sh BUILD_DIR
set -euo pipefail

build=${1:?usage: install_layout.sh BUILD_DIR}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
root=$(mktemp -d /tmp/kvpeer-install.XXXXXX)
trap 'rm -rf "$root"' EXIT

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

if ! DESTDIR="$root" cmake --install "$build" --prefix /usr >"$root.log" 2>&1; then
  cat "$root.log" >&2; rm -f "$root.log"
  echo "FAIL: cmake --install failed" >&2
  exit 1
fi
rm -f "$root.log"

# Executables, mode 0755, and they run from where they were installed.
for bin in usr/sbin/kvpeerd usr/bin/kvpeerctl; do
  if [ ! -f "$root/$bin" ] || [ ! -x "$root/$bin" ]; then
    fail "/$bin missing or not executable"
    continue
  fi
  [ "$(stat -c %a "$root/$bin")" = 755 ] || fail "/$bin has mode $(stat -c %a "$root/$bin"), want 755"
  "$root/$bin" --version >/dev/null || fail "/$bin --version failed"
done

# Data files, byte-identical to their sources, mode 0644.
expect_file() {  # installed path, source path
  if [ ! -f "$root/$1" ]; then
    fail "/$1 missing"
  elif ! cmp -s "$root/$1" "$2"; then
    fail "/$1 differs from ${2#"$src"/}"
  elif [ "$(stat -c %a "$root/$1")" != 644 ]; then
    fail "/$1 has mode $(stat -c %a "$root/$1"), want 644"
  fi
}
expect_file usr/lib/systemd/system/kvpeerd.service "$src/systemd/kvpeerd.service"
expect_file usr/lib/systemd/system/kvpeerd@.service "$src/systemd/kvpeerd@.service"
expect_file usr/lib/sysusers.d/kvpeer.conf "$src/systemd/kvpeer.sysusers.conf"
expect_file usr/share/doc/kvpeer/examples/kvpeerd.example.toml "$src/config/kvpeerd.example.toml"
expect_file usr/share/doc/kvpeer/README.md "$src/README.md"
for doc in "$src"/docs/*.md; do
  expect_file "usr/share/doc/kvpeer/$(basename "$doc")" "$doc"
done

# Each unit's ExecStart names a binary this install provides.
for unit in kvpeerd.service kvpeerd@.service; do
  exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$root/usr/lib/systemd/system/$unit")
  [ -n "$exec_path" ] && [ -x "$root$exec_path" ] || fail "$unit: ExecStart binary '$exec_path' is not installed"
done

# The C++ client (clients/cpp): headers, library and pkg-config file, and a
# program built from them alone with what pkg-config says.
multiarch=$(gcc -print-multiarch)
for header in client.h answer.h descriptor_passing.h request.h result.h types.h; do
  expect_file "usr/include/kvpeer/$header" "$src/clients/cpp/include/kvpeer/$header"
done
pc="$root/usr/lib/$multiarch/pkgconfig/kvpeer-client.pc"
if [ ! -f "$root/usr/lib/$multiarch/libkvpeer-client.a" ] || [ ! -f "$pc" ]; then
  fail "libkvpeer-client.a or kvpeer-client.pc missing under /usr/lib/$multiarch"
else
  cat >"$root/engine.cc" <<'PROGRAM'
#include <kvpeer/client.h>
int main() {
  kvpeer::Result<kvpeer::Client> client = kvpeer::Client::Connect("/nonexistent.sock");
  return !client.ok() && client.error().code == kvpeer::ErrorCode::kConnection ? 0 : 1;
}
PROGRAM
  flags=$(pkg-config --cflags --libs "$pc")  # relocatable: the prefix is found from the .pc file
  # A sanitizer or coverage build installs an instrumented library: the
  # program links the same runtime (CMakeLists.txt's options), so it is built
  # by the build's own compiler (clang for scripts/test.sh's sanitizer builds).
  cache="$build/CMakeCache.txt"
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache" 2>/dev/null)
  cxx=${cxx:-g++}
  if grep -q '^KVPEER_SANITIZE:BOOL=ON' "$cache" 2>/dev/null; then flags="$flags -fsanitize=address,undefined"; fi
  if grep -q '^KVPEER_TSAN:BOOL=ON' "$cache" 2>/dev/null; then flags="$flags -fsanitize=thread"; fi
  if grep -q '^KVPEER_COVERAGE:BOOL=ON' "$cache" 2>/dev/null; then flags="$flags --coverage"; fi
  # shellcheck disable=SC2086
  if ! "$cxx" -o "$root/engine" "$root/engine.cc" $flags 2>"$root/engine.log"; then
    fail "a program using kvpeer/client.h does not build with pkg-config's flags ($cxx): $(cat "$root/engine.log")"
  elif ! "$root/engine"; then
    fail "a program using kvpeer/client.h built but did not run as expected"
  fi
  rm -f "$root/engine" "$root/engine.cc" "$root/engine.log"
fi

# Nothing outside /usr (no /etc: the package never owns a config file).
others=$(find "$root" -mindepth 1 -maxdepth 1 ! -name usr -printf '/%P\n')
[ -z "$others" ] || fail "installed outside /usr: $others"

if [ "$failures" -ne 0 ]; then
  echo "installed files:" >&2
  (cd "$root" && find . -type f | sort) >&2
  exit 1
fi
echo "install layout OK: $(cd "$root" && find . -type f | wc -l) files under /usr"
