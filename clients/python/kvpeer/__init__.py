"""Python client for kvpeerd's control API, plus an engine simulator.

    from kvpeer import Client, Region, KvpeerError

Stdlib only (Python 3.9+: socket.send_fds, os.memfd_create)."""

from .client import MAX_LINE_BYTES, Client, KvpeerError, ProtocolError, Region

__all__ = ["Client", "KvpeerError", "ProtocolError", "Region", "MAX_LINE_BYTES"]
__version__ = "0.1.0"
