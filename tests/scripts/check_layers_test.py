#!/usr/bin/env python3
"""scripts/check_layers.py against tiny fake source trees.

Each test writes a tree into a temporary folder (every component folder of the
script's table, plus the files under test), runs the script on it and checks
its exit status and lines. The fake files use the real components: session may
include protocol, protocol may not include session.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
SCRIPT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "..", "..", "scripts", "check_layers.py"))
_spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
check_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layers)


class CheckLayersTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = self._tmp.name
        for folder in check_layers.COMPONENTS:
            os.makedirs(os.path.join(self.root, folder), exist_ok=True)
        # The premises the fake files rely on.
        self.assertIn("protocol", check_layers.COMPONENTS["session"])
        self.assertNotIn("session", check_layers.COMPONENTS["protocol"])
        self.assertIn("session", check_layers.COMPONENTS["daemon"])

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def run_script(self):
        proc = subprocess.run([sys.executable, SCRIPT, self.root], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        return proc.returncode, proc.stdout.splitlines()

    def test_allowed_forbidden_and_missing(self):
        self.write("session/a.h", '#pragma once\n#include "protocol/b.h"\n')
        self.write("protocol/b.h", '#pragma once\n#include "session/a.h"\n#include <vector>\n')
        self.write("protocol/c.cc", '#include "protocol/missing.h"\n')
        status, lines = self.run_script()
        self.assertEqual(status, 1, lines)
        self.assertEqual(lines, [
            "protocol/b.h:2: protocol may not include session/a.h (session)",
            "protocol/c.cc:1: includes protocol/missing.h, which names no file "
            "(project includes are written from the source root)",
        ])

    def test_clean_tree_passes_with_summary(self):
        self.write("session/a.h", '#pragma once\n#include "protocol/b.h"\n')
        self.write("protocol/b.h", '#pragma once\n#include <string>\n')
        status, lines = self.run_script()
        self.assertEqual(status, 0, lines)
        self.assertEqual(len(lines), 1)
        self.assertTrue(lines[0].startswith("check_layers: OK: 2 files"), lines)

    def test_internal_folder_is_for_its_component_only(self):
        self.write("session/internal/h.h", "#pragma once\n")
        self.write("session/s.cc", '#include "session/internal/h.h"\n')
        self.write("daemon/d.cc", '#include "session/internal/h.h"\n')
        status, lines = self.run_script()
        self.assertEqual(status, 1, lines)
        self.assertEqual(lines, ["daemon/d.cc:1: daemon may not include session/internal/h.h (session, internal)"])

    def test_file_in_no_component_and_excluded_folders(self):
        self.write("util/x.h", "#pragma once\n")
        # Not scanned: tests, fuzz and build trees may include anything.
        self.write("tests/t.cc", '#include "daemon/nothing.h"\n')
        self.write("build-asan/g.h", '#include "nowhere.h"\n')
        status, lines = self.run_script()
        self.assertEqual(status, 1, lines)
        self.assertEqual(lines, ["util/x.h: in no component (add its folder to COMPONENTS in scripts/check_layers.py)"])

    def test_cmake_link_to_a_higher_layer(self):
        self.write("protocol/CMakeLists.txt",
                   "add_library(kvpeer_protocol STATIC x.cc)\n"
                   "# target_link_libraries(kvpeer_protocol PUBLIC kvpeer_daemon) is a comment\n"
                   "target_link_libraries(kvpeer_protocol\n  PUBLIC kvpeer_base Boost::headers\n"
                   "  PRIVATE kvpeer_session)\n")
        self.write("session/CMakeLists.txt",
                   "target_link_libraries(kvpeer_session PUBLIC kvpeer_protocol kvpeer_nope)\n")
        status, lines = self.run_script()
        self.assertEqual(status, 1, lines)
        self.assertEqual(lines, [
            "protocol/CMakeLists.txt:3: protocol may not link kvpeer_session (session)",
            "session/CMakeLists.txt:1: kvpeer_session links kvpeer_nope, which is in no component "
            "(add it to LIBRARIES)",
        ])


if __name__ == "__main__":
    unittest.main()
