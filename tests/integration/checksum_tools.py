"""What the checksum tests (test_checksums, test_checksums_raw_producer,
test_checksums_seal) share: the frame size, the seed of the corruption run,
the xxh3 format, and status look-ups.
"""

import os
import re

from kvpeer_testing.fault_tools import peer_entry


FRAME_BLOCKS = 4  # data frames are at most 1 MiB: four 256 KiB blocks
SEED = int(os.environ.get("KVPEER_CHECKSUM_SEED", "20261204"))
HEX16 = re.compile(r"^[0-9a-f]{16}$")
NO_FEATURES = ["--features", ""]


def counters(daemon):
    return daemon.status()["counters"]


def features_of(daemon, peer_id):
    entry = peer_entry(daemon, peer_id)
    return None if entry is None else entry.get("features")


def block_number(reason):
    m = re.search(r"block (\d+)", reason or "")
    return int(m.group(1)) if m else None
