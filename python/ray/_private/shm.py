# SPDX-License-Identifier: Apache-2.0
"""Values in shared memory on this node (docs/DESIGN.md, "Large values").

A value of at least ``MIN_BYTES`` (pickled, buffers framed out of band as
serialization.py does) is written once by its producer into a memfd, which
is sealed (no write, grow or shrink from then on) and named to beamd in the
put or task_done (``shm_fd``, ``shm_size``); beamd opens it through
/proc/<producer>/fd and keeps it as the value's storage, charged to the
node's ``object_store_memory``. A reader on the node is told beamd's fd and
maps it read-only through /proc/<beamd>/fd: numpy arrays and other pickle-5
buffers come back as read-only views of that mapping, no copy. Nothing is
ever named in a file system, so whoever is killed, no memory is left
behind: it goes with the last fd and mapping.

A client turns this on after ``hello`` (the ``shm`` op) when beamd offers it
(it keeps this client's values: not a member's client) and this process may
open beamd's fds; otherwise every value stays inline.
"""

import ctypes
import errno
import fcntl
import mmap
import os
import weakref

MIN_BYTES = 100 * 1024  # Ray's max_direct_call_object_size; measured in bench/bench_data.py
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE

# mmap(2) itself: Python's mmap.mmap keeps a dup of the fd for as long as
# the map lives, which would cost a reader one fd per value it holds
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value


def turn_on(client, hello):
    """Whether values go through shared memory on this connection; when
    they may, tells beamd so (the `shm` op)."""
    pid = hello.get("pid")
    if not hello.get("shm") or not pid or os.environ.get("BEAM_SHM", "1") == "0":
        return False
    try:
        os.listdir(f"/proc/{pid}/fd")  # the access a map needs (same user, may trace it)
    except OSError:
        return False
    client.request("shm", {})
    return True


def write(parts, size):
    """A sealed memfd holding the concatenation of parts (size bytes): its
    fd, which the caller closes once beamd has it."""
    fd = os.memfd_create("beam-object", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        views = [memoryview(p).cast("B") for p in parts]
        off = 0
        while views:
            n = os.pwritev(fd, views[:1024], off)
            off += n
            while views and n >= views[0].nbytes:
                n -= views[0].nbytes
                views.pop(0)
            if views and n:
                views[0] = views[0][n:]
        if off != size:
            raise OSError(errno.EIO, f"wrote {off} of {size} bytes to a memfd")
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read(desc, daemon_pid):
    """A read-only memoryview of the value beamd described ({"fd", "size",
    "ino"}): a map of its memfd (a ctypes array over it), unmapped once the
    last view made of it is gone."""
    size = desc["size"]
    fd = os.open(f"/proc/{daemon_pid}/fd/{desc['fd']}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_ino != desc["ino"] or st.st_size != size:
            raise OSError(errno.ESTALE, "beamd's fd for the value names another file")
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, f"could not map a value of {size} bytes: {os.strerror(err)}")
    finally:
        os.close(fd)
    mapping = (ctypes.c_char * size).from_address(addr)
    weakref.finalize(mapping, _libc.munmap, addr, size)
    return memoryview(mapping).cast("B").toreadonly()
