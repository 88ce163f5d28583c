"""The kvpeer Python package installs the two supported ways, offline:

  PipInstallTest    `pip install --no-index --no-build-isolation` of
                    clients/python into a fresh `python3 -m venv
                    --system-site-packages` (Debian's python3 with its
                    python3-setuptools and python3-wheel; no network), then
                    imports kvpeer, kvpeer.vllm and, with the vLLM stand-in,
                    kvpeer.vllm.KvpeerSecondaryTier from the venv
  CmakeInstallTest  `cmake --install` (what the .deb packs) puts the package
                    under /usr/lib/python3/dist-packages/kvpeer with py.typed
                    and without tests or caches, and it imports from there

The Python must be Debian's (setuptools older than 70.1 builds wheels with
the `wheel` package, which python3-wheel provides): $KVPEER_SYSTEM_PYTHON,
default /usr/bin/python3.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
PKG_SRC = HERE.parent
REPO = HERE.parents[2]
SYSTEM_PYTHON = os.environ.get("KVPEER_SYSTEM_PYTHON", "/usr/bin/python3")
STUB = HERE / "vllm_stub"

IMPORT_CHECK = r"""
import sys, kvpeer, kvpeer.vllm, kvpeer.pipelined
from kvpeer.vllm import params, publisher, probes, identity, region, metrics
assert kvpeer.__file__.startswith(sys.argv[1]), kvpeer.__file__
import importlib.resources as r
assert (r.files("kvpeer") / "py.typed").is_file(), "py.typed missing"
print("ok", kvpeer.__file__)
"""

TIER_CHECK = r"""
from kvpeer.vllm import KvpeerSecondaryTier
from vllm.v1.kv_offload.tiering.base import SecondaryTierManager
assert issubclass(KvpeerSecondaryTier, SecondaryTierManager)
print("tier ok")
"""


def _run(argv, **kwargs):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                          **kwargs)


def _offline_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update({"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1",
                "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"})
    env.update(extra or {})
    return env


class PipInstallTest(unittest.TestCase):
    def setUp(self):
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            self.skipTest(f"no system python at {SYSTEM_PYTHON}")
        self.tmp = Path(tempfile.mkdtemp(prefix="kvpeer-pip-"))
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_pip_install_offline_into_venv(self):
        src = self.tmp / "src"  # a copy: setuptools writes build/ and *.egg-info next to the sources
        shutil.copytree(PKG_SRC, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
        venv = self.tmp / "venv"
        r = _run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(venv)], env=_offline_env())
        self.assertEqual(r.returncode, 0, r.stdout)
        pip = _run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", str(src)],
                   env=_offline_env(), cwd=self.tmp)
        self.assertEqual(pip.returncode, 0, pip.stdout)
        site = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                    env=_offline_env())
        purelib = site.stdout.strip()
        r = _run([str(venv / "bin" / "python"), "-c", IMPORT_CHECK, purelib], env=_offline_env(), cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stdout)
        r = _run([str(venv / "bin" / "python"), "-c", TIER_CHECK], env=_offline_env({"PYTHONPATH": str(STUB)}),
                 cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stdout)
        installed = {p.relative_to(purelib).as_posix() for p in Path(purelib, "kvpeer").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts}
        self.assertIn("kvpeer/vllm/tier.py", installed)
        self.assertFalse([p for p in installed if "test" in p or "vllm_stub" in p], installed)


class CmakeInstallTest(unittest.TestCase):
    def test_cmake_install_puts_the_package_in_dist_packages(self):
        build = Path(os.environ.get("KVPEER_BIN_DIR", REPO / "build"))
        if not (build / "cmake_install.cmake").exists():
            self.skipTest(f"no configured build tree at {build}")
        root = Path(tempfile.mkdtemp(prefix="kvpeer-install-py-"))
        self.addCleanup(shutil.rmtree, root, True)
        r = _run(["cmake", "--install", str(build), "--prefix", "/usr"], env={**os.environ, "DESTDIR": str(root)})
        self.assertEqual(r.returncode, 0, r.stdout)
        dist = root / "usr/lib/python3/dist-packages"
        files = sorted(p.relative_to(dist).as_posix() for p in (dist / "kvpeer").rglob("*") if p.is_file())
        want = sorted(p.relative_to(PKG_SRC).as_posix() for p in (PKG_SRC / "kvpeer").rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)
        self.assertEqual(files, want)
        for rel in want:
            self.assertEqual((dist / rel).read_bytes(), (PKG_SRC / rel).read_bytes(), rel)
            self.assertEqual(oct((dist / rel).stat().st_mode & 0o777), "0o644", rel)
        python = SYSTEM_PYTHON if os.access(SYSTEM_PYTHON, os.X_OK) else sys.executable
        r = _run([python, "-c", IMPORT_CHECK, str(dist)], env=_offline_env({"PYTHONPATH": str(dist)}), cwd=root)
        self.assertEqual(r.returncode, 0, r.stdout)


if __name__ == "__main__":
    unittest.main()
