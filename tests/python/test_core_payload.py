# SPDX-License-Identifier: Apache-2.0
"""How a received value reaches Python (docs/DESIGN.md "One payload on its
path"): `_beam` reads each frame into memory of its own and hands a payload
of 1 KiB or more to pickle as a read-only memoryview of that frame, which
the loaded value keeps alive; frames of every size, split across reads or
sharing one, arrive whole."""

import gc

import pytest


def _raw_get(ray, ref):
    """The daemon's [status, data] entry for ref, as _beam returns it."""
    client = ray._private.worker.runtime().client
    return client.request("get", {"objs": [ref._id], "timeout_ms": -1})["values"][0]


def test_long_payload_is_a_read_only_view_short_one_bytes(ray_start):
    ray = ray_start
    long_ref, short_ref = ray.put(b"L" * 5000), ray.put(b"S" * 10)
    status, data = _raw_get(ray, long_ref)
    assert status == 0
    assert isinstance(data, memoryview) and data.readonly
    with pytest.raises(TypeError):
        data[0] = 0
    assert ray._private.serialization.loads(data) == b"L" * 5000
    status, data = _raw_get(ray, short_ref)
    assert isinstance(data, bytes)
    assert ray._private.serialization.loads(data) == b"S" * 10
    assert isinstance(long_ref._id, bytes)  # ids stay bytes


def test_view_outlives_the_reply_and_the_connection(ray_start):
    ray = ray_start
    payload = bytes(range(256)) * 64
    _, data = _raw_get(ray, ray.put(payload))
    for _ in range(20):  # more frames through the same reader
        ray.get(ray.put(b"x" * 3000))
    ray.shutdown()
    gc.collect()
    assert ray._private.serialization.loads(data) == payload


def test_numpy_result_is_a_zero_copy_view_that_outlives_the_driver_connection(ray_start):
    np = pytest.importorskip("numpy")
    ray = ray_start

    @ray.remote
    class Source:
        def array(self, n):
            return np.arange(n, dtype=np.float64)

    s = Source.remote()
    got = ray.get(s.array.remote(1 << 12))  # 32 KiB: inline (larger ones are mapped: test_shm_objects.py)
    assert not got.flags.owndata and not got.flags.writeable
    assert got.ctypes.data % 64 == 0
    # its memory is the received frame's (no copy for alignment or otherwise)
    base = got
    while getattr(base, "base", None) is not None:
        base = base.base
    assert isinstance(base, memoryview) and type(base.obj).__name__ == "FrameBytes"
    ray.shutdown()
    gc.collect()
    np.testing.assert_array_equal(got, np.arange(1 << 12, dtype=np.float64))


def test_frames_of_every_size_across_read_boundaries(ray_start):
    ray = ray_start

    @ray.remote
    class Echo:
        def echo(self, x):
            return x

    e = Echo.remote()
    # around the view threshold, the 64 KiB read buffer, and larger
    sizes = [0, 1, 1000, 1023, 1024, 1025, 65_000, 65_531, 65_532, 65_536, 65_540, 131_072, (1 << 20) + 3]
    values = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    # one at a time through the actor (the worker reads each as a call)
    for v in values:
        assert ray.get(e.echo.remote(v)) == v
    # many in flight: replies and pushes share reads and straddle them
    refs = [e.echo.remote(v) for v in values * 3]
    assert ray.get(refs) == values * 3
    # and several values in one get reply
    assert ray.get([ray.put(v) for v in values]) == values
