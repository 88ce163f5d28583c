"""Where the binaries under test are: $KVPEER_BIN_DIR (default <repo>/build)."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def bin_dir():
    return Path(os.environ.get("KVPEER_BIN_DIR", REPO / "build"))


def kvpeerd_path():
    return bin_dir() / "daemon" / "kvpeerd"


def kvpeerctl_path():
    return bin_dir() / "cli" / "kvpeerctl"
