# SPDX-License-Identifier: Apache-2.0
"""Large values through shared memory on a node (docs/DESIGN.md, "Large
values"; shm.h, ray/_private/shm.py): a value of 256 KiB or more is
written once into a sealed memfd that beamd keeps; readers on the node map
it read-only, so a numpy array comes back as a view of the mapping; the
node's object_store_memory bounds them (ObjectStoreFullError); nothing is
left behind whoever is SIGKILLed; a member's clients get the value inline.

What counts as left behind: memfds named beam-object among a process's fds
(/proc/<pid>/fd) and mappings of them (/proc/<pid>/maps)."""

import gc
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from beamkit.daemon import Beamd, pointed_at
from beamkit.procs import BEAM_MEMFD, alive, wait_gone, wait_until
from beamkit.procs import memfds as _memfds

np = pytest.importorskip("numpy")

MIB = 1 << 20
MEMFD = BEAM_MEMFD


def _mappings(pid):
    """How many mappings of beam-object memfds pid has."""
    with open(f"/proc/{pid}/maps") as f:
        return sum(MEMFD in line for line in f)


def _is_mapping(obj):
    """Whether obj is the object shm.read maps a value with (a ctypes array
    over the mapping, unmapped when it goes)."""
    import ctypes

    return isinstance(obj, ctypes.Array) and obj._type_ is ctypes.c_char


def _shm(d):
    store = d.status()["object_store"]
    return store["count"], store["bytes"]


def _flush(ray):
    ray._private.worker.runtime().client.flush()


@pytest.fixture
def node():
    """A beamd with a 16 MiB object_store_memory, and this process's ray on it."""
    d = Beamd(num_gpus=0, num_cpus=4, extra=["--object-store-memory", str(16 * MIB)])
    with pointed_at(d.socket):
        import ray

        ray.init()
        try:
            yield d, ray
        finally:
            ray.shutdown()
    d.check_closed()


def _store_class(ray):
    @ray.remote(num_cpus=0)
    class Store:
        def make(self, n):
            return np.arange(n, dtype=np.uint8)

        def look(self, x):
            base = x
            while getattr(base, "base", None) is not None:
                base = base.base
            return int(x.sum()), x.flags.writeable, _is_mapping(getattr(base, "obj", base))

        def pid(self):
            return os.getpid()

    return Store


# --- zero copy ---


def test_a_large_array_comes_back_as_a_read_only_view_of_the_mapping(node):
    d, ray = node
    x = np.arange(MIB // 8, dtype=np.float64)  # 1 MiB
    ref = ray.put(x)
    count, used = _shm(d)
    assert count == 1 and used >= x.nbytes  # the value is beamd's memfd, charged to the budget
    got = ray.get(ref)
    np.testing.assert_array_equal(got, x)
    assert not got.flags.writeable and not got.flags.owndata
    base = got
    while getattr(base, "base", None) is not None:
        base = base.base
    assert isinstance(base, memoryview) and _is_mapping(base.obj)
    # its buffer lies in a mapping of the memfd in this process
    addr = got.ctypes.data
    with open("/proc/self/maps") as f:
        spans = [line.split()[0] for line in f if MEMFD in line]
    assert any(int(s.split("-")[0], 16) <= addr < int(s.split("-")[1], 16) for s in spans), spans
    assert got.ctypes.data % 64 == 0
    # small values stay inline
    ray.get(ray.put(np.zeros(1000)))
    assert _shm(d)[0] == 1


def test_actor_return_and_argument_are_mapped(node):
    d, ray = node
    s = _store_class(ray).remote()
    got = ray.get(s.make.remote(2 * MIB))
    assert got.nbytes == 2 * MIB and not got.flags.writeable
    base = got
    while getattr(base, "base", None) is not None:
        base = base.base
    assert _is_mapping(base.obj)
    # a large argument is put first and the actor maps it (read-only, as in Ray)
    x = np.ones(MIB, dtype=np.uint8)
    total, writeable, base = ray.get(s.look.remote(x))
    assert (total, writeable, base) == (MIB, False, True)
    # a small one travels inline in the call
    total, writeable, base = ray.get(s.look.remote(np.ones(1000, dtype=np.uint8)))
    assert total == 1000 and not base


def test_a_producer_writes_a_memfd_again_only_once_no_one_holds_it(node):
    """The producer's pool (shm.py): a memfd is written again only when no
    one else has it open or mapped (its write lease), never under a live
    value or a reader's view."""
    d, ray = node
    from ray._private import shm

    def put(k):
        return ray.put(np.full(MIB, k, dtype=np.uint8))

    r1 = put(1)
    y1 = ray.get(r1)  # a view of r1's memfd, here
    r2 = put(2)  # r1's memfd is beamd's and mapped: another one
    del r1
    gc.collect()
    r3 = put(3)  # r1 is released, but y1 still maps its memfd
    assert (y1 == 1).all() and (ray.get(r2) == 2).all() and (ray.get(r3) == 3).all()
    del y1, r2, r3
    gc.collect()
    idle = len(shm._pool)
    assert 1 <= idle <= shm.POOL_MAX
    before = _memfds(os.getpid())
    for k in range(4, 12):  # once free they are written again: no new memfd
        assert (ray.get(put(k)) == k).all()
    assert _memfds(os.getpid()) <= before
    assert wait_until(lambda: (_flush(ray), _shm(d))[1] == (0, 0), 10), _shm(d)


def test_a_dropped_result_is_released_at_once_so_its_memfd_is_written_again(node):
    """A reader's last ref to a value in shared memory sends its release at
    once (refcount.prompt), not batched: by the next call the producer's
    memfd is free again, so an actor returning a value each call, dropped
    each time, writes one memfd again and again."""
    d, ray = node
    s = _store_class(ray).remote()
    pid = ray.get(s.pid.remote())
    for _ in range(6):
        assert ray.get(s.make.remote(MIB)).nbytes == MIB
    assert _memfds(pid) == 1
    # a large argument is put, carried by the call and released at once
    # after it is sent, never before: each call finds it
    x = np.ones(MIB, dtype=np.uint8)
    for _ in range(6):
        assert ray.get(s.look.remote(x))[0] == MIB
    assert wait_until(lambda: (_flush(ray), _shm(d))[1] == (0, 0), 10), _shm(d)


def test_a_call_unmaps_its_arguments_before_its_result_is_sent(node):
    """A worker drops a call's arguments before it sends the result, so a
    large argument's mapping is gone by the time its caller has the result:
    the caller's memfd is free for its next argument (shm.py's pool)."""
    d, ray = node
    s = _store_class(ray).remote()
    pid = ray.get(s.pid.remote())
    before = _memfds(os.getpid())
    for k in range(6):
        x = np.full(MIB, k, dtype=np.uint8)
        assert ray.get(s.look.remote(x))[0] == k * MIB
        assert _mappings(pid) == 0
    assert _memfds(os.getpid()) <= before + 1  # one memfd, written again each call


def test_an_argument_an_actor_keeps_is_never_written_again(node):
    """The caller's pool writes a memfd again only when no one holds it: an
    actor that keeps a large argument (a view of its mapping) sees it as it
    was passed while later arguments of that size are written."""
    d, ray = node

    @ray.remote(num_cpus=0)
    class Keeper:
        def keep(self, x):
            self.x = x
            return int(x[0])

        def look(self, x):
            return int(x.min()), int(x.max())

        def kept(self):
            return int(self.x.min()), int(self.x.max())

    k = Keeper.remote()
    x = np.full(MIB, 1, dtype=np.uint8)
    assert ray.get(k.keep.remote(x)) == 1
    x[:] = 9  # the caller's own array: the actor's copy is as it was at the call
    for j in range(2, 8):
        assert ray.get(k.look.remote(np.full(MIB, j, dtype=np.uint8))) == (j, j)
    assert ray.get(k.kept.remote()) == (1, 1)


def test_an_actor_writing_its_returned_array_again_changes_no_reader(node):
    """What a reader got stays as it was returned: the actor's later writes
    to its array, and the actor's later values of the same size (its memfd
    pool), never show through a view the driver or another actor holds."""
    d, ray = node

    @ray.remote(num_cpus=0)
    class Keeper:
        def __init__(self):
            self.x = np.zeros(MIB, dtype=np.uint8)

        def give(self, k):
            self.x[:] = k
            return self.x

        def scribble(self):
            self.x[:] = 255
            return int(self.x.sum())

    @ray.remote(num_cpus=0)
    class Reader:
        def keep(self, x):
            self.x = x  # a view of the mapping, kept
            return int(x[0])

        def check(self):
            return int(self.x.min()), int(self.x.max())

    k = Keeper.remote()
    readers = [Reader.remote() for _ in range(2)]
    held = ray.get(k.give.remote(1))  # held here
    assert ray.get(k.scribble.remote()) == 255 * MIB
    assert (held == 1).all()
    kept = [ray.get(r.keep.remote(k.give.remote(2 + i))) for i, r in enumerate(readers)]
    assert kept == [2, 3]  # two readers hold views of two results
    for j in range(4, 10):  # more values of that size while all are held
        assert (ray.get(k.give.remote(j)) == j).all()
    ray.get(k.scribble.remote())
    assert (held == 1).all()
    assert ray.get([r.check.remote() for r in readers]) == [(2, 2), (3, 3)]


def test_a_large_part_is_copied_whole_in_chunks_whoever_copies_them(monkeypatch):
    """shm._copy: a part past COPY_SPLIT is cut in chunks that the caller
    and the copy threads take; every byte lands once, and a copy thread
    that never runs delays nothing (the caller takes every chunk)."""
    from ray._private import shm

    n = 3 * shm.COPY_CHUNK + 12345  # not a whole number of chunks
    src = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    monkeypatch.setattr(shm, "COPY_SPLIT", shm.COPY_CHUNK)
    monkeypatch.setattr(shm, "COPY_THREADS", 3)
    dst = bytearray(n)
    shm._copy(memoryview(dst), memoryview(src))
    assert dst == src.tobytes()

    class Idle:  # copy threads that are never scheduled
        def submit(self, fn):
            pass

    monkeypatch.setattr(shm, "_copy_threads", Idle)
    dst = bytearray(n)
    shm._copy(memoryview(dst), memoryview(src))
    assert dst == src.tobytes()


def test_copy_nt_copies_any_span_and_refuses_what_it_cannot_write():
    """_beam.copy_nt (ntcopy.h), each chunk's copy: any offset and length
    of either side lands whole; lengths that differ, or a destination that
    cannot be written, raise instead of copying."""
    import _beam

    src = np.random.default_rng(3).integers(0, 256, 5 * 16384 + 77, dtype=np.uint8)
    for so, do, n in ((0, 0, src.nbytes), (1, 13, 4 * 16384 + 5), (63, 0, 16384), (5, 7, 100)):
        dst = bytearray(src.nbytes + 64)
        _beam.copy_nt(memoryview(dst)[do : do + n], memoryview(src)[so : so + n])
        assert dst[do : do + n] == src[so : so + n].tobytes()
        assert not any(dst[:do]) and not any(dst[do + n :])
    with pytest.raises(ValueError):
        _beam.copy_nt(bytearray(10), b"x" * 11)
    with pytest.raises(TypeError):
        _beam.copy_nt(b"y" * 10, b"x" * 10)


# --- the budget ---


def test_a_put_past_object_store_memory_raises_object_store_full(node):
    d, ray = node
    first = ray.put(np.ones(10 * MIB, dtype=np.uint8))
    with pytest.raises(ray.exceptions.ObjectStoreFullError, match="object store"):
        ray.put(np.ones(10 * MIB, dtype=np.uint8))
    assert _shm(d)[0] == 1
    del first
    gc.collect()
    _flush(ray)
    assert wait_until(lambda: _shm(d) == (0, 0), 10), _shm(d)
    again = ray.put(np.ones(10 * MIB, dtype=np.uint8))  # room again once the first is freed
    assert ray.get(again).nbytes == 10 * MIB


def test_an_actor_result_past_the_budget_fails_the_call_not_the_actor(node):
    d, ray = node
    s = _store_class(ray).remote()
    with pytest.raises(ray.exceptions.ObjectStoreFullError):
        ray.get(s.make.remote(20 * MIB))
    assert ray.get(s.make.remote(MIB)).nbytes == MIB


# --- nothing left behind after SIGKILL ---

PRODUCER = textwrap.dedent("""
    import os, sys, numpy as np, ray
    from ray._private import shm
    shm.POOL_MAX = 0  # no idle memfds kept to write again: every one counted is a value's
    ray.init()
    keep = [ray.put(np.ones(1 << 20, dtype=np.uint8)) for _ in range(3)]
    held = ray.get(keep[0])
    print(os.getpid(), flush=True)
    sys.stdin.read()
""")


# after a line on stdin: drops the array, then prints its own count of
# beam-object mappings and fds
COUNT_AFTER_DROP = textwrap.dedent("""
    sys.stdin.readline()
    del held
    import gc
    gc.collect()
    maps = sum("memfd:beam-object" in line for line in open("/proc/self/maps"))
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    print(maps, sum(link.startswith("/memfd:beam-object") for link in links), flush=True)
    sys.stdin.read()
""")


def test_sigkill_of_the_producer_frees_its_values(node):
    d, ray = node
    base_fds = _memfds(d.pid)
    p = subprocess.Popen([sys.executable, "-c", PRODUCER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline())
        assert _shm(d)[0] == 3 and _memfds(d.pid) == base_fds + 3
        assert _mappings(pid) >= 1  # the array it got maps one
        os.kill(pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # its connection's end frees what it owned: beamd's fds and maps go
    assert wait_until(lambda: _shm(d) == (0, 0), 10), _shm(d)
    assert _memfds(d.pid) == base_fds and _mappings(d.pid) == 0


def test_sigkill_of_a_reader_leaves_the_value_to_its_owner(node):
    d, ray = node

    @ray.remote(num_cpus=0)
    class Reader:
        def read(self, refs):
            self.held = ray.get(refs[0])  # nested: the reader gets it itself and keeps the view
            return os.getpid(), int(self.held.sum())

    ref = ray.put(np.ones(MIB, dtype=np.uint8))
    r = Reader.remote()
    pid, total = ray.get(r.read.remote([ref]))
    assert total == MIB and _mappings(pid) == 1
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 10)
    assert _shm(d)[0] == 1  # still its owner's
    assert ray.get(ref).sum() == MIB
    del ref
    gc.collect()
    _flush(ray)
    assert wait_until(lambda: _shm(d) == (0, 0), 10), _shm(d)
    assert _memfds(d.pid) == 0 and _mappings(d.pid) == 0


def test_sigkill_of_beamd_leaves_only_the_readers_mappings_which_go_with_them():
    d = Beamd(num_gpus=0, num_cpus=2)
    try:
        with pointed_at(d.socket):
            code = PRODUCER.replace("sys.stdin.read()", COUNT_AFTER_DROP)
            p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                pid = int(p.stdout.readline())
                assert _memfds(d.pid) == 3
                d.expect_signal = True
                os.kill(d.pid, signal.SIGKILL)
                d.proc.wait(10)
                # the driver still reads its array: its mapping holds the memory now, nothing else does
                assert alive(pid) and _mappings(pid) == 1 and _memfds(pid) == 0
                p.stdin.write("\n")
                p.stdin.flush()
                maps, fds = map(int, p.stdout.readline().split())
                assert (maps, fds) == (0, 0)  # the array dropped: the last of the memory went with it
            finally:
                p.kill()
                p.wait()
                wait_gone(p.pid, 10)
    finally:
        d.close()


# --- across nodes ---


def test_a_large_value_crosses_nodes_inline(make_cluster):
    c = make_cluster(members=1)
    import ray

    ray.init(address=c.head.socket)
    Store = _store_class(ray)
    far = Store.options(resources={"node:127.0.0.2": 0.001}).remote()
    x = np.arange(3 * MIB, dtype=np.uint8)
    ref = ray.put(x)  # on the head's node: in shared memory there
    assert c.head.status()["object_store"]["count"] == 1
    # the member's actor gets it over the link (beamd reads its mapping), as a plain value
    total, writeable, base = ray.get(far.look.remote(ref))
    assert total == int(x.sum()) and not base
    total, _, base = ray.get(far.look.remote(x))  # an argument put for the call, fetched the same way
    assert total == int(x.sum()) and not base
    # and what it makes comes back to the head's driver whole
    got = ray.get(far.make.remote(3 * MIB))
    np.testing.assert_array_equal(got, x)
    ray.shutdown()
