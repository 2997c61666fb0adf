# SPDX-License-Identifier: Apache-2.0
"""Values in shared memory on this node (docs/DESIGN.md, "Large values").

A value of at least ``MIN_BYTES`` (pickled, buffers framed out of band as
serialization.py does) is written once by its producer into a memfd sealed
against growing and shrinking, which is named to beamd in the put or
task_done (``shm_fd``, ``shm_size``); beamd opens it through
/proc/<producer>/fd and keeps it as the value's storage, charged to the
node's ``object_store_memory``. A reader on the node is told beamd's fd and
maps it read-only through /proc/<beamd>/fd: numpy arrays and other pickle-5
buffers come back as read-only views of that mapping, no copy. Nothing is
ever named in a file system, so whoever is killed, no memory is left
behind: it goes with the last fd and mapping.

A producer keeps the memfds it wrote (a few, ``POOL_MAX`` and
``POOL_BYTES`` at most) and writes a later value of the same size into one
again, through its mapping (a memcpy into pages already there, not new
pages), once no one else has it open: a write lease (``F_SETLEASE``) is
granted only when every other open of the file (beamd's, a reader's, held
by its mapping too) is gone. So that it is gone by the producer's next
value, a process sends the release of a value it read from or put into
shared memory at once (refcount.prompt), not batched. A large part is
copied in chunks on a few threads at once (``_copy``), as Ray's store does.

A client turns this on after ``hello`` (the ``shm`` op) when beamd offers it
(it keeps this client's values: not a member's client) and this process may
open beamd's fds; otherwise every value stays inline.
"""

import concurrent.futures
import ctypes
import errno
import fcntl
import mmap
import os
import signal
import threading
import weakref

MIN_BYTES = 256 * 1024  # measured: inline is faster under it (docs/DESIGN.md, "Large values"); Ray's is 100 KiB
POOL_MAX = 4  # memfds a producer keeps to write again
POOL_BYTES = 512 << 20
COPY_SPLIT = 8 << 20  # a part this large is copied in chunks at once (_copy)
COPY_THREADS = min(4, os.cpu_count() or 1)
COPY_CHUNK = 2 << 20
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW

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


def _map(fd, size, prot, flags=0):
    """A ctypes array over a new mapping of fd's first size bytes, unmapped
    once it is gone."""
    addr = _libc.mmap(None, size, prot, mmap.MAP_SHARED | flags, fd, 0)
    if addr in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"could not map a value of {size} bytes: {os.strerror(err)}")
    mapping = (ctypes.c_char * size).from_address(addr)
    weakref.finalize(mapping, _libc.munmap, addr, size)
    return mapping


class Memfd:
    """One memfd a producer writes values into: fd (to name to beamd), size,
    and, once it is written again, a writable mapping of it."""

    __slots__ = ("fd", "size", "view")

    def __init__(self, size):
        fd = os.memfd_create("beam-object", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            # opened again by path: a memfd as made is not counted as open
            # for writing, and a write lease (alone) would never be granted
            self.fd = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            self.fd, fd = fd, -1
        finally:
            if fd >= 0:
                os.close(fd)
        self.size = size
        self.view = None
        try:
            os.ftruncate(self.fd, size)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS)
            # a lease broken by a late open signals its holder: SIGURG, ignored by default, not SIGIO
            fcntl.fcntl(self.fd, 10, signal.SIGURG)  # F_SETSIG
        except BaseException:
            os.close(self.fd)
            raise

    def alone(self):
        """Whether no one else has it open (or mapped): it may be written."""
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError:
            return False
        fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return True

    def write(self, parts):
        if self.view is None:
            # its first value: written by the kernel into new pages; later
            # ones by memcpy into this mapping of those same pages
            _pwrite_all(self.fd, parts, self.size)
            return
        off = 0
        for p in parts:
            v = memoryview(p).cast("B")
            _copy(self.view[off : off + v.nbytes], v)
            off += v.nbytes
        if off != self.size:
            raise OSError(errno.EIO, f"wrote {off} of {self.size} bytes to a memfd")

    def prepare(self):
        """Maps it for writing again (its pages mapped at once)."""
        if self.view is None:
            self.view = memoryview(
                _map(self.fd, self.size, mmap.PROT_READ | mmap.PROT_WRITE, getattr(mmap, "MAP_POPULATE", 0x8000))
            ).cast("B")

    def close(self):
        self.view = None
        os.close(self.fd)


_copier = None  # threads that copy a large part's chunks beside the caller
_copier_lock = threading.Lock()


def _forget_copier():
    global _copier, _copier_lock
    _copier, _copier_lock = None, threading.Lock()  # a forked child has none of the parent's threads


os.register_at_fork(after_in_child=_forget_copier)


def _copy(dst, src):
    """dst[:] = src (byte views of one length): a part of COPY_SPLIT bytes
    or more in COPY_CHUNK chunks taken by the caller and up to
    COPY_THREADS - 1 threads at once, as Ray's store copies (one thread
    does not use the memory's bandwidth), each chunk by _beam.copy_nt,
    which lets the GIL go and stores past the cache (non-temporal: glibc's
    memcpy does not on this VM, whose reported L3 is 480 MiB; 64 MiB under
    load, measured: 9.8 ms one thread, 5.2 ms two, against 4.6 and 2.7
    with these stores). The caller copies whatever no thread has taken, so
    a thread that is not scheduled in time delays nothing. Small, one
    memcpy."""
    n = src.nbytes
    if n < COPY_SPLIT:
        dst[:] = src
        return
    job = _Chunks(dst, src)
    if COPY_THREADS > 1:
        pool = _copy_threads()
        for _ in range(COPY_THREADS - 1):
            pool.submit(job.run)
    job.run()
    job.wait()


def _copy_threads():
    global _copier
    with _copier_lock:
        if _copier is None:
            _copier = concurrent.futures.ThreadPoolExecutor(COPY_THREADS - 1, "beam-shm-copy")
        return _copier


class _Chunks:
    """One copy cut in COPY_CHUNK chunks, each taken once by whoever runs
    first (the caller or a copy thread); wait() returns once all are
    copied (or raises what a thread's copy raised)."""

    def __init__(self, d, s):
        import _beam

        self.copy, self.d, self.s = _beam.copy_nt, d, s
        self.todo = iter(range(0, d.nbytes, COPY_CHUNK))  # next() on it holds the GIL: each chunk once
        self.left = -(-d.nbytes // COPY_CHUNK)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error = None

    def run(self):
        for i in self.todo:
            try:
                self.copy(self.d[i : i + COPY_CHUNK], self.s[i : i + COPY_CHUNK])
            except BaseException as e:  # handed to the caller's wait
                self.error = e
                self.done.set()
                return
            with self.lock:
                self.left -= 1
                if not self.left:
                    self.done.set()

    def wait(self):
        self.done.wait()
        if self.error is not None:
            raise self.error


def _pwrite_all(fd, parts, size):
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


_pool = []  # idle Memfds, the most recently given back last
_pool_lock = threading.Lock()


def _reuse(size):
    with _pool_lock:
        for i in range(len(_pool) - 1, -1, -1):
            m = _pool[i]
            if m.size == size and m.alone():
                del _pool[i]
                return m
    return None


def write(parts, size, settle=None):
    """A memfd holding the concatenation of parts (size bytes): one this
    process wrote before and no one else has open any more, or a new one.
    settle(), when given, is called once before making a new one while one
    of that size is still held: it lets beamd free what this process already
    released (the releases it queued, then a round trip). Name m.fd to
    beamd, then give it back (give_back)."""
    m = _reuse(size)
    if m is None and settle is not None and any(x.size == size for x in _pool):
        settle()  # 0.1 ms against new pages' cost (about 0.3 ms a MiB)
        m = _reuse(size)
    if m is not None:
        m.prepare()
    else:
        m = Memfd(size)
    try:
        m.write(parts)
    except BaseException:
        m.close()
        raise
    return m


def give_back(m):
    """m may be written again once no one else holds it; the oldest idle
    memfds past POOL_MAX or POOL_BYTES are closed."""
    if m.size > POOL_BYTES:
        m.close()
        return
    with _pool_lock:
        _pool.append(m)
        while len(_pool) > POOL_MAX or sum(x.size for x in _pool) > POOL_BYTES:
            _pool.pop(0).close()


def drop_pool():
    """Closes every idle memfd (ray.shutdown)."""
    with _pool_lock:
        while _pool:
            _pool.pop().close()


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
        mapping = _map(fd, size, mmap.PROT_READ)
    finally:
        os.close(fd)
    return memoryview(mapping).cast("B").toreadonly()
