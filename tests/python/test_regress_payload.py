# SPDX-License-Identifier: Apache-2.0
"""beamd's payload path (issue 14, "one payload path") against a real beamd:
a frame of 64 KiB and more is read into a buffer of its own and its payload
is kept and sent from there (a span in the write queue) instead of copied.
These check what that must not change: frames before and after a large one
are answered in order, values of every size around the thresholds come back
byte for byte, and a reply written from an object's buffer still carries
the value when the object is released before the reply is read."""

import pytest

from beamkit.client import Conn, Ids, request
from beamkit.daemon import Beamd

# around the decoder's own-buffer size (64 KiB frames) and the span size (16 KiB values)
SIZES = [0, 1, (16 << 10) - 1, 16 << 10, (64 << 10) - 40, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, 1 << 20, 5 << 20]


def value(n, seed):
    return bytes((i * 31 + seed) & 0xFF for i in range(min(n, 4096))) * (n // 4096) + bytes(
        (i * 31 + seed) & 0xFF for i in range(n % 4096)
    )


@pytest.fixture(scope="module")
def daemon():
    d = Beamd()
    yield d
    assert d.stop() == 0, d.read_log()[-2000:]


def test_frames_around_large_ones_in_one_write_are_answered_in_order(daemon):
    with Conn(daemon.socket, timeout=30) as c:
        ids = Ids(c.hello())
        objs = [ids.obj() for _ in SIZES]
        # one write: puts of every size with a status between each, then one get of all
        data = []
        msgid = 10
        for i, (obj, n) in enumerate(zip(objs, SIZES)):
            data.append(request(msgid, "put", {"obj": obj, "data": value(n, i)}))
            data.append(request(msgid + 1, "status"))
            msgid += 2
        data.append(request(msgid, "get", {"objs": objs, "timeout_ms": 0}))
        c.send_raw(b"".join(data))
        for want in range(10, msgid):
            m = c.recv()
            assert m is not None and m[0] == 1 and m[1] == want and m[2] is None, m
        m = c.recv()
        assert m[1] == msgid and m[2] is None, m
        values = m[3]["values"]
        assert len(values) == len(SIZES)
        for i, n in enumerate(SIZES):
            assert values[i][0] == 0
            assert values[i][1] == value(n, i), f"value {i} ({n} bytes) came back different"
        c.call("release", {"objects": objs})


def test_a_reply_sent_from_an_object_outlives_its_release(daemon):
    """The get's reply is queued (unread) with the value as a span; the release
    right behind it frees the object; the reply must still carry the value."""
    n = 8 << 20
    with Conn(daemon.socket, timeout=30) as c:
        ids = Ids(c.hello())
        obj = ids.obj()
        c.call("put", {"obj": obj, "data": value(n, 7)})
        c.send_raw(
            request(50, "get", {"objs": [obj], "timeout_ms": 0})
            + request(51, "release", {"objects": [obj]})
            + request(52, "get", {"objs": [obj], "timeout_ms": 0})
        )
        first = c.recv()
        assert first[1] == 50 and first[3]["values"][0] == [0, value(n, 7)]
        assert c.recv()[1] == 51
        gone = c.recv()
        assert gone[1] == 52 and gone[3]["values"][0][0] == 3  # LOST: released
        assert daemon.status()["objects"]["count"] == 0


def test_large_args_and_results_through_an_actor(ray_start):
    ray = ray_start

    @ray.remote
    class Echo:
        def echo(self, b):
            return b

        def size(self, b):
            return len(b)

    e = Echo.remote()
    for i, n in enumerate(SIZES):
        v = value(n, i)
        assert ray.get(e.size.remote(v)) == n
        assert ray.get(e.echo.remote(v)) == v
    # several large calls in flight at once, answered in order
    vs = [value(3 << 20, s) for s in range(4)]
    assert ray.get([e.echo.remote(v) for v in vs]) == vs
