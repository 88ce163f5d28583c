"""The CPU tier's shared region, as the daemon must see it.

vLLM's CPU (primary) tier keeps its blocks in one file,
`/dev/shm/vllm_offload_{engine_id}.mmap`, created with mode 0600 by the
engine's user and mapped MAP_SHARED; the tier we implement gets a
memoryview of shape (num_blocks, row_stride) over it, where block id b is
row b. The daemon runs as another user, so it cannot open that file by
path: we open it (we are its owner) and pass the descriptor with
`register_region` (SCM_RIGHTS). The daemon then addresses block b at byte
b * row_stride, which is vLLM's row b only if the descriptor and the view
are the same memory; `open_region` checks that (the view's address lies in
a mapping of this very file) instead of trusting the path.
"""

from __future__ import annotations

import ctypes
import os
import stat
from dataclasses import dataclass
from typing import Optional

__all__ = ["RegionFile", "region_path", "open_region"]


def region_path(engine_id: str, directory: str = "/dev/shm") -> str:
    """Where vLLM's CPU tier keeps engine `engine_id`'s blocks."""
    return os.path.join(directory, f"vllm_offload_{engine_id}.mmap")


@dataclass
class RegionFile:
    """An open descriptor of the region and its geometry."""

    path: str
    fd: int
    num_blocks: int
    row_stride: int

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _view_address(view: memoryview) -> Optional[int]:
    """The address of the view's first byte, or None if it cannot be taken
    (a read-only view)."""
    try:
        c = ctypes.c_char.from_buffer(view)  # type: ignore[arg-type]
    except (TypeError, ValueError, BufferError):
        return None
    try:
        return ctypes.addressof(c)
    finally:
        del c


def _mapped_inode(address: int) -> Optional[tuple]:
    """(device major:minor, inode) of the file mapped at `address` in this
    process, from /proc/self/maps; None if nothing file-backed is there."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 5:
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                if start <= address < end:
                    inode = int(parts[4])
                    return (parts[3], inode) if inode else None
    except OSError:
        return None
    return None


def open_region(path: str, view: memoryview) -> RegionFile:
    """Opens `path` for the daemon and checks it against vLLM's view:
    a regular file owned by this user, as large as the view, and (where the
    view's address can be read) the file that backs the view."""
    if view.ndim != 2 or view.shape is None:
        raise ValueError(f"primary_kv_view must be 2-D (num_blocks, row_stride), got shape {view.shape}")
    num_blocks, row_stride = int(view.shape[0]), int(view.shape[1]) * view.itemsize
    if num_blocks <= 0 or row_stride <= 0:
        raise ValueError(f"primary_kv_view is empty: shape {view.shape}")
    if view.strides is not None and view.strides[0] != row_stride:
        raise ValueError(f"primary_kv_view rows are {view.strides[0]} bytes apart, not {row_stride}: "
                         "block b would not be at b * row_stride")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise ValueError(f"the CPU tier's region {path} cannot be opened: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"the CPU tier's region {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise ValueError(f"the CPU tier's region {path} is owned by uid {st.st_uid}, not by this "
                             f"engine's uid {os.geteuid()}")
        need = num_blocks * row_stride
        if st.st_size < need:
            raise ValueError(f"the CPU tier's region {path} is {st.st_size} bytes; the view needs "
                             f"{num_blocks} x {row_stride} = {need}")
        address = _view_address(view)
        if address is not None:
            mapped = _mapped_inode(address)
            if mapped is None or mapped[1] != st.st_ino:
                what = "anonymous memory" if mapped is None else f"inode {mapped[1]}"
                raise ValueError(f"primary_kv_view is not a mapping of {path} (it maps {what}, the file is "
                                 f"inode {st.st_ino}); pass region_path= naming this engine's region")
        return RegionFile(path=path, fd=fd, num_blocks=num_blocks, row_stride=row_stride)
    except BaseException:
        os.close(fd)
        raise
