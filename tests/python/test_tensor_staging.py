# SPDX-License-Identifier: Apache-2.0
"""ray/_private/tensors.py and the tensor paths of ray/dag/_transport.py
that run without a GPU: CPU tensors are never staged (nothing pinned, no
copy of a contiguous one), a frame's tensors round-trip with a Stage given,
a tensor rebuilt over a read-only buffer (a shared-memory slot's view) is
its own writable copy and leaves the buffer untouched, and a Lane's slot
is written again only once no one else holds it open. The CUDA branches
need a device (bench/bench_data.py --gpu)."""

import os
import socket
import threading

import pytest

from beamkit.gloo import NEEDS_TORCH

np = pytest.importorskip("numpy")


def test_pow2_and_spans_alignment():
    from ray._private import tensors

    assert [tensors._pow2(n) for n in (1, 2, 3, 1000, 1 << 20)] == [1, 2, 4, 1024, 1 << 20]


@pytest.mark.skipif(any(m.args[0] for m in NEEDS_TORCH), reason="needs torch")
def test_cpu_tensors_are_not_staged():
    import torch

    from ray._private import tensors

    stage = tensors.Stage()
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert stage.to_host(t) is t or stage.to_host(t).data_ptr() == t.data_ptr()
    strided = t.t()
    host = stage.to_host(strided)
    assert host.is_contiguous() and torch.equal(host, strided)
    assert stage.buf is None and stage.staged == 0  # nothing pinned
    moved = tensors.to_device(t, "cpu")
    assert torch.equal(moved, t)


@pytest.mark.skipif(any(m.args[0] for m in NEEDS_TORCH), reason="needs torch")
def test_frames_round_trip_tensors_with_a_stage():
    import torch

    from ray._private import tensors
    from ray.dag import _transport as T

    stage = tensors.host_stage()
    stage.reset()
    value = {"h": torch.randn(64, 8).to(torch.bfloat16), "i": torch.arange(5), "e": torch.empty(0, 3)}
    payload, bufs = T.dumps(value, stage=stage)
    back = T.loads(payload, [bytearray(memoryview(b).cast("B")) for b in bufs])
    assert all(torch.equal(back[k], value[k]) and back[k].dtype == value[k].dtype for k in value)
    # over read-only buffers (a slot's views): a writable copy, the buffer untouched
    ro = [memoryview(bytes(memoryview(b).cast("B"))).toreadonly() for b in bufs]
    back = T.loads(payload, ro)
    assert torch.equal(back["i"], value["i"])
    back["i"].add_(1)
    assert bytes(ro[1]) == bytes(memoryview(bufs[1]).cast("B"))


def test_a_lane_reuses_a_slot_only_once_the_reader_let_it_go():
    from ray.dag import _transport as T

    before = _memfds()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    w, r = T.Conn(a), T.Conn(b)
    w.enable_shm(2)
    x = np.arange(1 << 20, dtype=np.uint8)
    try:
        w.send(T.VALUE, 1, 0, b"p", [x])
        f1 = r.read()
        assert f1.flags & T.F_SHM and f1.buffers[0].readonly and bytes(f1.buffers[0]) == x.tobytes()
        w.send(T.VALUE, 1, 1, b"p", [x[::-1].copy()])  # the first slot is held: a second one
        f2 = r.read()
        assert len(w.lane.slots) == 2 and bytes(f1.buffers[0]) == x.tobytes()
        sender = threading.Thread(target=w.send, args=(T.VALUE, 1, 2, b"p", [x]))
        sender.start()  # both held: the socket (more than its buffer: read meanwhile)
        f3 = r.read()
        sender.join()
        assert not f3.flags & T.F_SHM and w.lane.sent == 2
        del f1
        w.send(T.VALUE, 1, 3, b"p", [x])  # the first one is free again
        f4 = r.read()
        assert f4.flags & T.F_SHM and len(w.lane.slots) == 2 and w.lane.sent == 3
        assert bytes(f2.buffers[0]) == x[::-1].tobytes()
        w.send(T.VALUE, 1, 4, b"p", [np.zeros(100, dtype=np.uint8)])  # small: the socket
        assert not r.read().flags & T.F_SHM
    finally:
        w.close()
        r.close()
    assert _memfds() == before  # the writer's slots closed with it; the reader keeps only mappings


def _memfds():
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
        except OSError:
            pass
    return n
