"""kvpeer's shared Python test support (issue 26, item 7): the one kvpeerd
launcher (daemon.Daemon), the one wait helper (wait.wait_until / wait.poll),
the one log tail printed on failure (logs), the DaemonTestCase base
(harness), a raw wire-protocol peer (wire_peer), a fault-injecting TCP proxy
(fault_proxy, its connections in proxy_pipe) and the fault tests' helpers
(fault_tools); paths says where the binaries are ($KVPEER_BIN_DIR).

Test code only: the installable client (clients/python/kvpeer) never imports
it. ctest puts tests/pylib and clients/python on PYTHONPATH (tests/CMakeLists.txt);
by hand, `PYTHONPATH=tests/pylib:clients/python`.
"""
