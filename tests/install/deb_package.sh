#!/usr/bin/env bash
# `cpack -G DEB` from BUILD_DIR into a temporary directory, then checks the
# package with dpkg-deb: its control fields (name, version, architecture,
# Depends computed by dpkg-shlibdeps), its maintainer scripts, and its
# contents (binaries, units, sysusers.d, docs, example; all root-owned;
# nothing under /etc).
#
#   tests/install/deb_package.sh BUILD_DIR
set -euo pipefail

build=${1:?usage: deb_package.sh BUILD_DIR}
out=$(mktemp -d /tmp/kvpeer-deb.XXXXXX)
trap 'rm -rf "$out"' EXIT

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

if ! cpack -G DEB --config "$build/CPackConfig.cmake" -B "$out" >"$out/cpack.log" 2>&1; then
  cat "$out/cpack.log" >&2
  echo "FAIL: cpack -G DEB failed" >&2
  exit 1
fi
shopt -s nullglob
debs=("$out"/*.deb)
if [ ${#debs[@]} -ne 1 ]; then
  cat "$out/cpack.log" >&2
  echo "FAIL: expected one .deb in $out, found ${#debs[@]}" >&2
  exit 1
fi
deb=${debs[0]}
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
[ "$(basename "$deb")" = "kvpeer_${version}_${arch}.deb" ] || fail "file name $(basename "$deb")"

# Control fields.
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = kvpeer ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version), want $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture: $(field Architecture)"
[ -n "$(field Maintainer)" ] || fail "no Maintainer"
depends=$(field Depends)
for lib in libc6 libsystemd0; do
  [[ "$depends" == *"$lib"* ]] || fail "Depends lacks $lib (dpkg-shlibdeps): $depends"
done

# Maintainer scripts: present, executable, valid sh.
dpkg-deb -e "$deb" "$out/control"
for script in postinst prerm postrm; do
  if [ ! -x "$out/control/$script" ]; then
    fail "$script missing or not executable"
  elif ! sh -n "$out/control/$script"; then
    fail "$script is not valid sh"
  fi
done
grep -q 'systemd-sysusers /usr/lib/sysusers.d/kvpeer.conf' "$out/control/postinst" ||
  fail "postinst does not create the kvpeer user"
[ ! -e "$out/control/conffiles" ] || fail "unexpected conffiles: $(cat "$out/control/conffiles")"

# Contents: "MODE OWNER ... ./PATH" lines of dpkg-deb -c.
dpkg-deb -c "$deb" >"$out/contents"
expect() {  # path, mode
  grep -Eq "^$2 root/root .* \./$1\$" "$out/contents" || fail "no $2 root/root ./$1 in the package"
}
expect usr/sbin/kvpeerd -rwxr-xr-x
expect usr/bin/kvpeerctl -rwxr-xr-x
expect usr/lib/systemd/system/kvpeerd.service -rw-r--r--
expect 'usr/lib/systemd/system/kvpeerd@\.service' -rw-r--r--
expect usr/lib/sysusers.d/kvpeer.conf -rw-r--r--
expect usr/share/doc/kvpeer/README.md -rw-r--r--
expect usr/share/doc/kvpeer/examples/kvpeerd.example.toml -rw-r--r--
expect usr/include/kvpeer/client.h -rw-r--r--
expect usr/lib/python3/dist-packages/kvpeer/__init__.py -rw-r--r--
expect usr/lib/python3/dist-packages/kvpeer/py.typed -rw-r--r--
expect usr/lib/python3/dist-packages/kvpeer/vllm/__init__.py -rw-r--r--
expect "usr/lib/$(gcc -print-multiarch)/pkgconfig/kvpeer-client.pc" -rw-r--r--
expect "usr/lib/$(gcc -print-multiarch)/libkvpeer-client.a" -rw-r--r--
if grep -q ' \./etc/' "$out/contents"; then fail "files under /etc: $(grep ' \./etc/' "$out/contents")"; fi
if grep -vq ' root/root ' "$out/contents"; then fail "files not owned by root: $(grep -v ' root/root ' "$out/contents")"; fi

# The packaged binaries run (stripped, with their libraries found).
dpkg-deb -x "$deb" "$out/root"
"$out/root/usr/sbin/kvpeerd" --version >/dev/null || fail "packaged kvpeerd does not run"
"$out/root/usr/bin/kvpeerctl" --version >/dev/null || fail "packaged kvpeerctl does not run"
# The packaged Python package imports from where the .deb puts it (vLLM's
# tier included: its vLLM imports happen only when vLLM loads it).
PYTHONPATH="$out/root/usr/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 \
  python3 -c 'import kvpeer, kvpeer.client' || fail "the packaged kvpeer Python package does not import"

if [ "$failures" -ne 0 ]; then
  echo "---- dpkg-deb -I ----" >&2; dpkg-deb -I "$deb" >&2
  echo "---- dpkg-deb -c ----" >&2; cat "$out/contents" >&2
  exit 1
fi
echo "deb OK: $(basename "$deb"), Depends: $depends"
