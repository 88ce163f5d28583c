# What `cmake --install` puts where, and the .deb (CPack), for prefix /usr:
#
#   /usr/sbin/kvpeerd                        daemon (daemon/CMakeLists.txt)
#   /usr/bin/kvpeerctl                       operator CLI (cli/CMakeLists.txt)
#   /usr/lib/systemd/system/kvpeerd.service  single instance
#   /usr/lib/systemd/system/kvpeerd@.service one instance per model
#   /usr/lib/sysusers.d/kvpeer.conf          the kvpeer user and group
#   /usr/share/doc/kvpeer/                   README.md and docs/*.md
#   /usr/share/doc/kvpeer/examples/kvpeerd.example.toml
#   /usr/lib/python3/dist-packages/kvpeer/   the Python client and kvpeer.vllm
#
# Nothing goes to /etc: the package never owns (or overwrites) a config
# file; the operator copies the example to /etc/kvpeer/. Units and
# sysusers.d live under the prefix's lib/, which systemd also reads for
# /usr/local. The units name /usr/sbin/kvpeerd, the .deb's path.
#
# REQUIRES: GNUInstallDirs included by the top-level CMakeLists.txt.

install(FILES
    ${PROJECT_SOURCE_DIR}/systemd/kvpeerd.service
    ${PROJECT_SOURCE_DIR}/systemd/kvpeerd@.service
  DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/systemd/kvpeer.sysusers.conf
  DESTINATION lib/sysusers.d RENAME kvpeer.conf)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")
install(FILES ${PROJECT_SOURCE_DIR}/config/kvpeerd.example.toml DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
# The Python package (clients/python/kvpeer: the client and vLLM's tier),
# where Debian's python3 finds it; the tests and caches stay out.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/clients/python/kvpeer DESTINATION lib/python3/dist-packages
  FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)

# ---- The Debian package: cpack -G DEB (tests/install/deb_package.sh) ------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvpeer)
set(CPACK_PACKAGE_VENDOR kvpeer)
set(CPACK_PACKAGE_CONTACT "kvpeer maintainers <kvpeer@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "peer-to-peer KV-cache block transfer daemon for LLM inference")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "kvpeerd runs one per node and moves KV-cache blocks that an LLM inference\n"
  "engine keeps in a shared-memory region straight from the producer node's\n"
  "region into the consumer node's slots. kvpeerctl is its operator CLI.")
# Depends: computed from the binaries' shared libraries (dpkg-shlibdeps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The units' ExecReload= runs /bin/kill (procps).
set(CPACK_DEBIAN_PACKAGE_DEPENDS procps)
# systemd-sysusers creates the kvpeer user; the units need systemd anyway.
# python3 runs the kvpeer Python package (optional: the daemon needs none).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd, python3")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/deb/postinst
  ${PROJECT_SOURCE_DIR}/packaging/deb/prerm
  ${PROJECT_SOURCE_DIR}/packaging/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# `make package_source`: the tree without git data, build trees or caches.
set(CPACK_SOURCE_IGNORE_FILES "/\\.git/" "/build[^/]*/" "/__pycache__/")
include(CPack)
