# SPDX-License-Identifier: Apache-2.0
"""Hardening: beamd against bad input and misbehaving clients, over raw unix
connections with frames built by hand (beamkit's msgpack codec, so the
tests need no msgpack package and can write invalid msgpack on purpose).

Every bad input must get a clear error reply (``[1, msgid, {code, message},
nil]``) or an ``error`` push and a closed connection, never a crash, hang or
leak; and while it happens a second client keeps asking ``status`` and a
``ray`` driver keeps calling its actor. After each test the daemon is alive,
its open fds, clients and objects are back where they were, and its RSS is
sane (the ``served`` fixture).
"""

import fcntl
import gc
import os
import resource
import socket
import struct
import termios
import threading
import time

import pytest

from beamkit.client import Conn, Ids, Watcher, base_params, expect_closed_with_error, expect_error, pack, request
from beamkit.daemon import Beamd, one_ray_for_module
from beamkit.procs import fd_count, raise_nofile, rss_kib, sanitized, wait_until
from beamkit.wire import Raw, frame

# Limits the watcher and the RSS check hold a daemon to.
MAX_STALL_S = 1.0
STALL_S = 30.0  # the slow-reader test: a socket call that makes no progress this long is a stall
MAX_RSS_KIB = 256 * 1024


class Node:
    """The daemon the bad-input tests share, with a watcher and a ray driver."""

    def __init__(self, beamd, watcher, ray, actor):
        self.beamd = beamd
        self.pid = beamd.proc.pid
        self.socket = beamd.socket
        self.watcher = watcher
        self.ray = ray
        self.actor = actor
        self.baseline_rss = rss_kib(self.pid)

    def status(self):
        with Conn(self.socket) as c:
            c.hello("ctl")
            return c.call("status")

    def settle_ray(self):
        gc.collect()
        from ray._private import worker as rtmod

        rtmod.runtime().client.flush()

    def snapshot(self):
        self.settle_ray()
        st = self.status()
        return {
            "fds": fd_count(self.pid),
            "clients": st["clients"],
            "objects": st["objects"]["count"],
            "actors": len(st["actors"]),
            "groups": sum(g["state"] != "REMOVED" for g in st["placement_groups"]),
        }

    def check(self, base):
        """The daemon served everyone during the test and is back where it was."""
        assert self.beamd.proc.poll() is None, f"beamd died:\n{self.beamd.read_log()[-3000:]}"
        # the ray driver still works
        ray = self.ray
        assert ray.get(self.actor.echo.remote(b"still here"), timeout=10) == b"still here"
        assert ray.get(ray.put(list(range(100))), timeout=10) == list(range(100))
        answers, slowest, errors = self.watcher.take()
        assert not errors, errors
        assert answers > 0, "the watcher got no status answer during the test"
        assert slowest < MAX_STALL_S, f"another client waited {slowest:.2f}s for status"
        # every connection the test opened is gone, and what it held with it
        ok = wait_until(lambda: fd_count(self.pid) <= base["fds"], 5)
        assert ok, f"beamd has {fd_count(self.pid)} fds open, {base['fds']} before the test"

        def back():
            self.settle_ray()
            now = self.snapshot()
            return (
                now["clients"] == base["clients"]
                and now["objects"] == base["objects"]
                and now["groups"] == base["groups"]
            )

        assert wait_until(back, 5), (self.snapshot(), base)
        rss = rss_kib(self.pid)
        if not sanitized(self.pid):
            assert rss < MAX_RSS_KIB, f"beamd RSS is {rss} KiB (was {self.baseline_rss} KiB at start)"


@pytest.fixture(scope="module")
def node():
    """One beamd for the module (4 MiB outq so backpressure is quick to
    reach), a watcher client and an in-process ray driver with one actor."""
    raise_nofile(4096)
    with one_ray_for_module(8, 4, extra=["--max-outq", str(4 << 20), "--log-level", "info"]) as d:
        import ray

        @ray.remote
        class Echo:
            def echo(self, x):
                return x

        actor = Echo.remote()
        assert ray.get(actor.echo.remote(1), timeout=30) == 1
        watcher = Watcher(d.socket)
        try:
            yield Node(d, watcher, ray, actor)
        finally:
            watcher.stop()


@pytest.fixture
def served(node):
    base = node.snapshot()
    node.watcher.take()
    yield node
    node.check(base)


def driver(node):
    c = Conn(node.socket)
    c.hello("driver")
    return c


# --- frames that are not messages -------------------------------------------------


@pytest.mark.parametrize(
    "data,words",
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", ["frame length"]),
        (b"\x00\x00\x00\x00", ["frame length 0"]),
        (b"\xff\xff\xff\xff", ["frame length 4294967295"]),
        (struct.pack(">I", (256 << 20) + 1), ["frame length 268435457"]),
        (frame(b"\xc1"), ["0xc1"]),
        (frame(b"\xd4\x01\x02"), ["ext"]),
        (frame(b"\x93\x00\x01"), ["cannot fit"]),
        (frame(b"\xcd\x01"), ["truncated"]),
        (frame(b"\x90\x90"), ["stray"]),
        (frame(os.urandom(64) + b"\xc1"), []),
        (frame(b"\xdd\xff\xff\xff\xff"), ["cannot fit"]),
        (frame(b"\xdf\xff\xff\xff\xff"), ["cannot fit"]),
        (frame(b"\xdc\xff\xff\x01"), ["cannot fit"]),
        (frame(b"\xdb\xff\xff\xff\xff" + b"x" * 8), ["over the limit"]),
        (frame(b"\xc6\xff\xff\xff\xff" + b"x" * 8), ["truncated"]),
        (frame(pack([0, 1, "status", Raw(b"\xdf\xff\xff\xff\xff")])), ["cannot fit"]),
        (frame(pack([0, 1, "status", {"x": Raw(b"\xdd\x7f\xff\xff\xff")}])), ["cannot fit"]),
        (frame(pack(5)), ["array"]),
        (frame(pack([])), ["array"]),
        (frame(pack(["0", 1, "status", {}])), ["array"]),
        (frame(pack([0, "1", "status", {}])), ["request"]),
        (frame(pack([0, -1, "status", {}])), ["request"]),
        (frame(pack([0, 1, 7, {}])), ["request"]),
        (frame(pack([0, 1, "status", []])), ["request"]),
        (frame(pack([0, 1, "status"])), ["request"]),
        (frame(pack([0, 1, "status", {}, None])), ["request"]),
        (frame(pack([3, 1, "status", {}])), ["kind"]),
        (frame(pack([1, 1, None, None])), ["requests only"]),
        (frame(pack([2, "log", {"text": "x"}])), ["requests only"]),
    ],
    ids=lambda v: None if isinstance(v, list) else repr(v[:24]),
)
def test_bad_frames_get_an_error_push_and_a_close(served, data, words):
    for say_hello in (False, True):
        with Conn(served.socket) as c:
            if say_hello:
                c.hello()
            c.send_raw(data)
            expect_closed_with_error(c, "protocol error", *words)


def test_bad_frame_after_good_ones_is_answered_in_order(served):
    with driver(served) as c:
        c.send_raw(request(7, "status") + request(8, "nope") + frame(b"\xc1") + request(9, "status"))
        msgs = c.drain_until_closed()
        assert [m[1] for m in msgs[:2]] == [7, 8]
        assert msgs[0][2] is None and msgs[1][2]["code"] == "unknown_op"
        assert msgs[2][0] == 2 and msgs[2][1] == "error"
        assert len(msgs) == 3, "nothing after a protocol error is served"


def test_truncated_frame_then_eof(served):
    for cut in (1, 3, 4, 5, 20):
        data = request(1, "status", {"pad": "x" * 64})
        with Conn(served.socket) as c:
            c.send_raw(data[:cut])
            c.sock.shutdown(socket.SHUT_WR)
            assert c.drain_until_closed() == []
    # a frame announced as 100 MiB of which 1 MiB comes, then EOF
    with Conn(served.socket) as c:
        c.send_raw(struct.pack(">I", 100 << 20) + b"\x00" * (1 << 20))
        c.sock.shutdown(socket.SHUT_WR)
        assert c.drain_until_closed() == []


def test_frames_split_at_every_byte(served):
    data = request(1, "hello", {"role": "driver", "pid": os.getpid()}) + request(2, "status")
    with Conn(served.socket) as c:
        for i in range(len(data)):
            c.send_raw(data[i : i + 1])
            if i % 97 == 0:
                time.sleep(0.001)
        assert c.recv()[1] == 1
        r = c.recv()
        assert r[1] == 2 and r[2] is None and "node_id" in r[3]


def _nested(depth, leaf=1):
    """depth arrays inside each other around leaf."""
    return Raw(b"\x91" * depth + pack(leaf))


def test_nesting_at_and_past_the_depth_limit(served):
    # the envelope is 1 level, params 2: 30 more arrays make 32, the default limit
    with driver(served) as c:
        expect_error(c.request("nope", {"deep": _nested(30)}), "unknown_op")
        assert c.request("status", {"deep": _nested(30)})[2] is None
    for extra in (31, 40, 1000, 100000):
        with Conn(served.socket) as c:
            c.send(Raw(pack([0, 1, "status", {"deep": _nested(extra)}])))
            expect_closed_with_error(c, "protocol error", "nesting deeper than 32")
    with Conn(served.socket) as c:  # maps nest too
        c.send_raw(frame(b"\x94\x00\x01\xa6status" + b"\x81\xa1k" * 40 + b"\x00"))
        expect_closed_with_error(c, "protocol error", "nesting")


def test_huge_counts_inside_a_valid_envelope(served):
    for bad in (
        b"\xdd\xff\xff\xff\xff",
        b"\xdf\xff\xff\xff\xff",
        b"\xdc\xff\xff",
        b"\xde\xff\xff",
        b"\x9f",
        b"\x8f",
        b"\xdb\xff\xff\xff\xff",
        b"\xc6\xff\xff\xff\xff",
        b"\xda\xff\xff",
    ):
        with driver(served) as c:
            c.send(Raw(pack([0, 1, "put", {"obj": c.hello_reply and Ids(c.hello_reply).obj(), "data": Raw(bad)}])))
            expect_closed_with_error(c, "protocol error")


def test_small_limits_are_enforced_exactly(tmp_path):
    """With --max-frame/--max-depth/--max-items/--max-str set small, a frame
    at each limit is served and one past it is refused."""
    d = Beamd(
        extra=[
            "--max-frame",
            "4096",
            "--max-depth",
            "6",
            "--max-items",
            "100",
            "--max-str",
            "50",
            "--log-level",
            "info",
        ]
    )
    w = Watcher(d.socket)
    try:

        def served_ok(params):
            with Conn(d.socket) as c:
                c.hello("ctl")
                r = c.request("status", params)
                assert r is not None and r[2] is None, r
                assert isinstance(r[3], dict)

        def refused(value, *words):
            with Conn(d.socket) as c:
                c.hello("ctl")
                c.send_raw(value if isinstance(value, bytes) else frame(pack(value)))
                expect_closed_with_error(c, "protocol error", *words)

        # depth: envelope 1 + params 2 + 4 arrays = 6
        served_ok({"x": _nested(4)})
        refused([0, 1, "status", {"x": _nested(5)}], "nesting deeper than 6")
        # str: 50 bytes ok, 51 not (keys are str too)
        served_ok({"x": "y" * 50})
        refused([0, 1, "status", {"x": "y" * 51}], "51 bytes", "limit of 50")
        refused([0, 1, "status", {"k" * 51: 1}], "limit of 50")
        # bin is not a str: only the frame limit applies
        served_ok({"x": b"y" * 3000})
        # items: envelope 4 + params 1 pair + n elements
        served_ok({"x": [0] * 95})
        refused([0, 1, "status", {"x": [0] * 96}], "more than 100 elements")
        # frame: exactly 4096 is fine, 4097 not, and the header alone is refused
        body = pack([0, 1, "status", {"x": b""}])
        pad = 4096 - len(body)
        body = pack([0, 1, "status", {"x": b"\0" * pad}])
        assert len(body) == 4096
        with Conn(d.socket) as c:
            c.hello("ctl")
            c.send_raw(frame(body))
            assert c.recv()[2] is None
        refused(struct.pack(">I", 4097), "frame length 4097 is outside 1..4096")
        # a reply that would pass max_frame is not sent: get says too_large
        with Conn(d.socket) as c:
            c.hello("driver")
            ids = Ids(c.hello_reply)
            objs = [ids.obj() for _ in range(3)]
            for o in objs:
                c.call("put", {"obj": o, "data": b"v" * 2000})
            expect_error(c.request("get", {"objs": objs, "timeout_ms": 0}), "too_large")
            assert c.request("get", {"objs": objs[:1], "timeout_ms": 0})[3]["values"][0] == [0, b"v" * 2000]
        answers, slowest, errors = w.take()
        assert not errors and answers > 0 and slowest < MAX_STALL_S
    finally:
        w.stop()
        rc, _ = d.close()
    assert rc == 0, d.read_log()[-3000:]


# --- requests with fields of the wrong type -------------------------------------------

# What each kind of field is given instead of its type (nil means absent, so
# it is only tried on required fields, through "missing").
WRONG = {
    "str": [5, -3, 1.5, True, b"bytes", ["a"], {"a": "b"}],
    "bin": ["str", 5, 1.5, False, [b"x"], {}],
    "int": ["1", 1.5, True, b"\x01", [1], {}, 2**64 - 1],
    "bool": [1, 0, "true", 1.0, b"", []],
    "float": ["1", True, b"", [], {}],
    "id16": [b"a" * 15, b"a" * 17, b"", "a" * 16, 16, [b"a" * 16]],
    "id18": [b"a" * 17, b"a" * 19, "a" * 18, 18],
    "id28": [b"a" * 27, b"a" * 29, b"", "a" * 28, 28, [b"a" * 28]],
    "ids28": [5, "x", b"a" * 28, {}, [b"a" * 27], [5], ["a" * 28], [None], [[b"a" * 28]]],
    "ids16": [5, b"a" * 16, [b"a" * 28], [b"a" * 15], ["a" * 16]],
    "strs": ["x", 5, {}, [5], [b"x"], ["a\0b"], [None]],
    "env": [[], "A=B", 5, {"A": 5}, {"A=B": "x"}, {"": "x"}, {5: "x"}, {"A\0": "x"}, {"A": "x\0y"}],
    "resources": [[], 5, "CPU", {"CPU": "1"}, {5: 1}, {"": 1}, {"R" * 200: 1}, {"CPU": [1]}, {"X": -1}],
    "bundles": [
        {},
        5,
        [],
        [5],
        [{}],
        [[]],
        [{"CPU": "1"}],
        [{"": 1}],
        [{"CPU": -1}],
        [{"CPU": 0}],
        [{"CPU": 1}] * 1025,
    ],
    "strategy": [5, "FAST", ""],
    "timeout": ["1", 1.5, -2, -(2**40)],
    "count": ["1", 1.5, 0, -1, 2],
    "nonneg": ["1", True, -1, -0.5],
    "class_name": [5, "", "C" * 257, "a\0b"],
    "method": [5, "", "m" * 1025, "a\0b"],
    "name": [5, "n" * 1025, "a\0b"],
    "path": [5, "a\0b"],
    "python": [5, "", "a\0b"],
    "put_status": ["0", 1.5, True, -1, 2, 5],
}


# op -> {field: (kind, required)}
FIELDS = {
    "put": {
        "obj": ("id28", 1),
        "data": ("bin", 1),
        "status": ("put_status", 0),
        "objects": ("ids28", 0),
        "actors": ("ids16", 0),
    },
    "get": {"objs": ("ids28", 1), "timeout_ms": ("timeout", 0)},
    "wait": {"objs": ("ids28", 1), "num_returns": ("count", 0), "timeout_ms": ("timeout", 0)},
    "submit": {
        "actor": ("id16", 1),
        "obj": ("id28", 1),
        "method": ("method", 1),
        "args": ("bin", 1),
        "objects": ("ids28", 0),
        "actors": ("ids16", 0),
    },
    "create_actor": {
        "actor": ("id16", 1),
        "class_name": ("class_name", 1),
        "class_data": ("bin", 1),
        "args": ("bin", 1),
        "python": ("python", 1),
        "cwd": ("path", 0),
        "name": ("name", 0),
        "noset_cuda": ("bool", 0),
        "num_cpus": ("nonneg", 0),
        "num_gpus": ("nonneg", 0),
        "memory": ("nonneg", 0),
        "resources": ("resources", 0),
        "sys_path": ("strs", 0),
        "env": ("env", 0),
        "objects": ("ids28", 0),
        "actors": ("ids16", 0),
        "placement_group": ("id18", 0),
        "bundle_index": ("int", 0),
        "capture_child_tasks": ("bool", 0),
        "max_restarts": ("int", 0),
        "max_task_retries": ("int", 0),
    },
    "kill": {"actor": ("id16", 1), "no_restart": ("bool", 0)},
    "hold": {"objects": ("ids28", 0), "actors": ("ids16", 0)},
    "release": {"objects": ("ids28", 0), "actors": ("ids16", 0)},
    "pg_create": {
        "pg": ("id18", 1),
        "strategy": ("strategy", 1),
        "bundles": ("bundles", 1),
        "name": ("name", 0),
        "detached": ("bool", 0),
    },
    "pg_ready": {"pg": ("id18", 1), "obj": ("id28", 1), "value": ("bin", 1)},
    "pg_remove": {"pg": ("id18", 1)},
    "pg_table": {"pg": ("id18", 0)},
    "get_actor": {"name": ("str", 1)},
}


def cases(op):
    for field, (kind, required) in FIELDS[op].items():
        for i, value in enumerate(WRONG[kind]):
            yield field, f"{kind}[{i}]", value
        if required:
            yield field, "missing", KeyError
            yield field, "nil", None


# Which field a message names when the fault is in a field it checks with
# others (create_actor's demand and string checks name one of the group).
ALSO = {
    "num_gpus": ("num_cpus",),
    "memory": ("num_cpus",),
    "python": ("class_name",),
    "cwd": ("class_name",),
    "name": ("class_name",),
    "placement_group": ("placement group",),
}


@pytest.mark.parametrize("op", sorted(FIELDS))
def test_wrong_field_types_get_bad_request_naming_the_field(served, op):
    with driver(served) as c:
        ids = Ids(c.hello_reply)
        pg = None
        if op == "pg_ready":
            pg = ids.pg()
            c.call("pg_create", {"pg": pg, "strategy": "PACK", "bundles": [{"CPU": 0.001}]})
        # the base request itself is fine
        r = c.request(op, base_params(op, ids, pg))
        assert r is not None and (r[2] is None or r[2]["code"] == "not_found"), r
        for field, label, value in cases(op):
            params = base_params(op, ids, pg)
            if value is KeyError:
                params.pop(field, None)
            else:
                params[field] = value
            r = c.request(op, params)
            if r is not None and r[2] is not None and r[2]["code"] == "not_found" and field in ("placement_group",):
                continue  # an unknown group is reported before the group's other checks
            names = (f"'{field}'", field) + ALSO.get(field, ())
            msg = expect_error(r, "bad_request")
            assert any(n in msg for n in names), f"{op}.{field} {label}: {msg!r} does not name the field"
        # the connection is still good for a proper request
        assert c.request("status")[2] is None


def test_hello_fields(served):
    bad = [
        {},
        {"role": 5},
        {"role": b"driver"},
        {"role": "admin"},
        {"role": ""},
        {"role": None},
        {"role": "driver", "pid": "1"},
        {"role": "driver", "pid": 1.5},
        {"role": "driver", "logs": 1},
        {"role": "ctl", "pid": 2**64 - 1},
    ]
    for params in bad:
        with Conn(served.socket) as c:
            expect_error(c.request("hello", params), "bad_request", "'")
            # no hello took: other ops are still refused, a good hello works
            expect_error(c.request("status"), "denied", "hello")
            assert c.request("hello", {"role": "ctl"})[2] is None
    worker_bad = [
        {"role": "worker"},
        {"role": "worker", "actor": b"a" * 16},
        {"role": "worker", "actor": b"a" * 15, "token": "t"},
        {"role": "worker", "actor": "a" * 16, "token": "t"},
        {"role": "worker", "actor": b"a" * 16, "token": 5},
    ]
    for params in worker_bad:
        with Conn(served.socket) as c:
            expect_error(c.request("hello", params), "bad_request")
    # a well-formed worker hello for no starting actor is denied and closed
    with Conn(served.socket) as c:
        expect_error(c.request("hello", {"role": "worker", "actor": b"a" * 16, "token": "t" * 32}), "denied")
        assert c.drain_until_closed() == []


def test_second_hello_and_ops_before_hello(served):
    with Conn(served.socket) as c:
        for op in ("status", "put", "get", "submit", "create_actor", "kill", "task_done", "nope"):
            r = c.request(op, {})
            if op == "nope":
                expect_error(r, "unknown_op", "nope")
            else:
                expect_error(r, "denied", "hello")
        c.hello("driver")
        msg = expect_error(c.request("hello", {"role": "driver", "pid": 1}), "bad_request")
        assert "already" in msg
        expect_error(c.request("hello", {"role": "worker", "actor": b"a" * 16, "token": "x"}), "bad_request", "already")
        assert c.call("status")["clients"]["drivers"] >= 2


def test_unknown_ops(served):
    with driver(served) as c:
        for op in ("", "nope", "STATUS", "status ", "hello\0", "x" * 5000, "\u00e9t\u00e9"):
            expect_error(c.request(op, {}), "unknown_op")
        # with msgid 0 the error comes as a push, and the connection stays
        c.send([0, 0, "nope", {}])
        m = c.recv()
        assert m[0] == 2 and m[1] == "error" and "unknown_op" in m[2]["message"]
        # a failed msgid-0 request too
        c.send([0, 0, "put", {"obj": 5}])
        m = c.recv()
        assert m[0] == 2 and m[1] == "error" and "bad_request" in m[2]["message"] and "obj" in m[2]["message"]
        assert c.request("status")[2] is None


def test_worker_only_ops_from_a_driver_and_a_ctl(served):
    for role in ("driver", "ctl"):
        with Conn(served.socket) as c:
            c.hello(role)
            ids = Ids(c.hello_reply)
            expect_error(c.request("actor_ready", {"ok": True}), "denied", "worker")
            expect_error(c.request("actor_ready", {"ok": False, "error": "x"}), "denied")
            expect_error(c.request("task_done", {"obj": ids.obj(), "status": 0, "data": b"x"}), "denied")
            expect_error(c.request("task_done", {}), "denied")
            c.send([0, 0, "task_done", {"obj": ids.obj(), "status": 0, "data": b"x"}])
            m = c.recv()
            assert m[0] == 2 and "denied" in m[2]["message"]
            assert c.request("status")[2] is None


def test_ids_that_do_not_exist(served):
    with driver(served) as c:
        ids = Ids(c.hello_reply)
        ghost = ids.obj()
        # get: the value is reported lost at once, whatever the timeout
        for t in (0, 100, -1):
            values = c.call("get", {"objs": [ghost], "timeout_ms": t})["values"]
            assert values[0][0] == 3 and b"never created" in values[0][1]
        assert c.call("wait", {"objs": [ghost, ids.obj()], "num_returns": 2, "timeout_ms": 0})["ready"] == [0, 1]
        # kill, hold and release of unknown ids are no-ops
        assert c.call("kill", {"actor": ids.actor()}) == {}
        assert c.call("hold", {"objects": [ghost], "actors": [ids.actor()]}) == {}
        assert c.call("release", {"objects": [ghost], "actors": [ids.actor()]}) == {}
        assert c.call("release", {"objects": [ghost]}) == {}  # twice
        # a call to an unknown actor fails as ActorDiedError, through its object
        obj = ids.obj()
        assert c.call("submit", {"actor": ids.actor(), "obj": obj, "method": "m", "args": b""}) == {}
        (value,) = c.call("get", {"objs": [obj], "timeout_ms": 1000})["values"]
        assert value[0] == 2 and b"no such actor" in value[1]
        # the same object id twice is refused
        expect_error(c.request("submit", {"actor": ids.actor(), "obj": obj, "method": "m", "args": b""}), "exists")
        expect_error(c.request("put", {"obj": obj, "data": b""}), "exists")
        # groups and names
        expect_error(c.request("pg_remove", {"pg": ids.pg()}), "not_found")
        expect_error(c.request("pg_ready", {"pg": ids.pg(), "obj": ids.obj(), "value": b""}), "not_found")
        assert c.call("pg_table", {"pg": ids.pg()}) == {"groups": []}
        expect_error(c.request("get_actor", {"name": "nobody"}), "not_found", "nobody")
        expect_error(c.request("get_actor", {"name": "x" * 5000}), "not_found")
        params = base_params("create_actor", ids)
        params["placement_group"] = ids.pg()
        expect_error(c.request("create_actor", params), "not_found", "placement group")
        # a put that names unknown refs inside its value is kept
        kept = ids.obj()
        assert c.call("put", {"obj": kept, "data": b"v", "objects": [ids.obj()], "actors": [ids.actor()]}) == {}
        assert c.call("get", {"objs": [kept], "timeout_ms": 0})["values"] == [[0, b"v"]]
        assert c.call("release", {"objects": [kept]}) == {}
        values = c.call("get", {"objs": [kept], "timeout_ms": 0})["values"]
        assert values[0][0] == 3, "a released object is gone"


def test_a_client_that_only_sends_msgid_zero_failures(served):
    """Many failing fire-and-forget requests: error pushes, in order, and
    the connection lives on."""
    with driver(served) as c:
        n = 2000
        c.send_raw(b"".join(request(0, "put", {"obj": i}) for i in range(n)) + request(1, "status"))
        pushes = 0
        while True:
            m = c.recv()
            if m[0] == 1:
                assert m[1] == 1
                break
            assert m[1] == "error"
            pushes += 1
        assert pushes == n


# --- many clients, and clients that do not read -------------------------------------


def test_500_concurrent_clients(served):
    n = 500
    raise_nofile(n + 200)
    conns = []
    try:
        for _ in range(n):
            conns.append(Conn(served.socket, timeout=20))
        t0 = time.monotonic()
        for i, c in enumerate(conns):
            c.send([0, 1, "hello", {"role": "driver" if i % 2 else "ctl", "pid": os.getpid()}])
            c.send([0, 2, "status", {}])
        for c in conns:
            r = c.recv()
            assert r[1] == 1 and r[2] is None
            c.hello_reply = r[3]
            r = c.recv()
            assert r[1] == 2 and r[2] is None
        elapsed = time.monotonic() - t0
        st = served.status()
        assert st["clients"]["drivers"] >= n // 2
        assert st["clients"]["ctl"] >= n // 2
        # each holds an object; they all go when the clients do
        for c in conns[:50]:
            c.call("put", {"obj": Ids(c.hello_reply).obj(), "data": b"x" * 100})
        assert elapsed < 10, f"500 clients took {elapsed:.1f}s for hello+status"
    finally:
        for c in conns:
            c.close()


def test_500_clients_when_started_with_a_soft_fd_limit_of_256():
    """beamd raises its own soft RLIMIT_NOFILE, so 500 clients are served
    even when it was started under a low one."""
    n = 500
    raise_nofile(n + 200)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        d = Beamd(extra=["--log-level", "warn"])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    conns = []
    try:
        for _ in range(n):
            conns.append(Conn(d.socket, timeout=20))
        for c in conns:
            c.send([0, 1, "hello", {"role": "ctl"}])
        for c in conns:
            r = c.recv()
            assert r is not None and r[1] == 1 and r[2] is None
        assert conns[-1].call("status")["clients"]["ctl"] == n
    finally:
        for c in conns:
            c.close()
        d.close()


def test_a_client_that_never_reads_cannot_grow_beamd(served):
    """status requests pipelined without reading: beamd stops reading the
    client once its replies back up, so its memory stays flat and the
    client's own sends block; everyone else is served meanwhile."""
    rss0 = rss_kib(served.pid)
    c = driver(served)
    try:
        c.sock.setblocking(False)
        batch = request(1, "status") * 512  # ~1 KiB of reply per ~20 bytes sent
        sent, blocked_since, dropped = 0, None, False
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end:
            try:
                sent += c.sock.send(batch)
                blocked_since = None
            except BlockingIOError:
                if blocked_since is None:
                    blocked_since = time.monotonic()
                elif time.monotonic() - blocked_since > 0.5:
                    break
                time.sleep(0.01)
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
        assert dropped or blocked_since is not None, "beamd kept reading a client that never reads"
        grown = rss_kib(served.pid) - rss0
        if not sanitized(served.pid):
            assert grown < 32 * 1024, f"beamd grew by {grown} KiB for a client that does not read ({sent} bytes sent)"
    finally:
        c.close()


def _read_until_eof(sock, timeout=10.0):
    """Bytes read until the peer closes (a dropped client may see a frame cut short)."""
    sock.setblocking(True)
    sock.settimeout(timeout)
    n = 0
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError):
            return n
        if not chunk:
            return n
        n += len(chunk)


def test_a_client_that_never_reads_replies_is_dropped_past_max_outq(served):
    """Pipelined gets, each of eight 1 MiB values, that the client does not
    read: the unsent replies pass --max-outq (4 MiB here) and beamd closes
    that one client, and the object it held goes with it. (beamd stops
    taking a client's frames once its queue passes the soft cap, so it is
    the replies of the frames already taken that pass the hard cap.)"""
    rss0 = rss_kib(served.pid)
    with driver(served) as c:
        obj = Ids(c.hello_reply).obj()
        c.call("put", {"obj": obj, "data": b"z" * (1 << 20)})
        c.send_raw(b"".join(request(10 + i, "get", {"objs": [obj] * 8, "timeout_ms": 0}) for i in range(64)))
        time.sleep(0.3)  # not reading
        got = _read_until_eof(c.sock)
        assert got < 16 << 20, f"beamd sent {got} bytes to a client it should have dropped"
    assert wait_until(lambda: "too many unread bytes queued" in served.beamd.read_log(), 5)
    grown = rss_kib(served.pid) - rss0
    if not sanitized(served.pid):
        assert grown < 64 * 1024, f"beamd grew by {grown} KiB for a client that does not read"


def test_a_slow_reader_is_paused_then_served_in_full(served):
    """A client that pipelines 20,000 status requests before reading anything
    still gets every reply, in order, once it reads.

    Each socket call may wait STALL_S for progress (not the whole exchange:
    a loaded machine may take long overall), and the socket's timeout is set
    once, before the writer starts (settimeout while another thread is in
    sendall changes the socket under it)."""
    n = 20000
    with driver(served) as c:
        data = memoryview(b"".join(request(100 + i, "status") for i in range(n)))
        c.sock.settimeout(STALL_S)
        sent = [0]
        done = threading.Event()

        def write():
            while sent[0] < len(data):
                sent[0] += c.sock.send(data[sent[0] :])
            done.set()

        t = threading.Thread(target=write, daemon=True)
        t.start()
        # beamd backs up and stops reading us: requests of ours lie unread in its socket
        assert wait_until(lambda: done.is_set() or (sent[0] > 0 and unread_by_peer(c.sock) > 0), STALL_S)
        for i in range(n):
            m = c.recv()
            assert m is not None and m[0] == 1 and m[1] == 100 + i and m[2] is None
        t.join(STALL_S)
        assert done.is_set()


def unread_by_peer(sock):
    """Bytes this socket sent that its peer has not read yet (SIOCOUTQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]


def test_a_large_frame_gives_its_memory_back(served):
    """A 64 MiB put, then release: beamd's RSS comes back down while the
    connection stays open (the decoder frees a large buffer once it is
    empty, and blocks of 1 MiB and up are their own mappings)."""
    if sanitized(served.pid):
        pytest.skip("ASan's quarantine keeps freed memory resident")
    with driver(served) as c:
        ids = Ids(c.hello_reply)
        c.call("status")
        before = rss_kib(served.pid)
        for size in (64 << 20, 8 << 20):
            obj = ids.obj()
            c.call("put", {"obj": obj, "data": b"x" * size})
            c.call("release", {"objects": [obj]})
            c.call("status")
        grown = rss_kib(served.pid) - before
        assert grown < 16 * 1024, f"beamd kept {grown} KiB after the objects were released"


def test_a_client_that_hangs_up_with_requests_in_flight(served):
    """gets parked on objects that will never be ready, a wait with a
    timeout, then the client hangs up mid-frame: its waiters, timers and
    holds all go (the served check counts fds, clients and objects)."""
    for _ in range(20):
        c = driver(served)
        ids = Ids(c.hello_reply)
        pending = ids.obj()
        # a call to an actor that will never start (more GPUs than exist)
        a = ids.actor()
        params = base_params("create_actor", ids)
        params.update(actor=a, num_gpus=64.0)
        c.call("create_actor", params)
        c.call("submit", {"actor": a, "obj": pending, "method": "m", "args": b""})
        c.send([0, 7, "get", {"objs": [pending], "timeout_ms": -1}])
        c.send([0, 8, "wait", {"objs": [pending], "num_returns": 1, "timeout_ms": 60000}])
        c.send_raw(request(9, "status")[:7])
        c.close()


def test_a_wait_on_many_ids_does_not_stall_the_daemon():
    d = Beamd(extra=["--log-level", "info"])
    try:
        with Conn(d.socket, timeout=30) as c, Conn(d.socket, timeout=1.0) as other:
            c.hello()
            other.hello("ctl")
            ids = Ids(c.hello_reply)
            objs = [ids.obj() for _ in range(120000)]
            c.send([0, 1, "wait", {"objs": objs, "num_returns": 1, "timeout_ms": 0}])
            time.sleep(0.2)  # beamd is reading and checking the frame
            t0 = time.monotonic()
            try:
                r = other.request("status")
            except socket.timeout:
                r = None
            assert (
                r is not None and r[2] is None
            ), f"status waited more than {time.monotonic() - t0:.1f}s behind one wait"
    finally:
        d.close()


def test_a_put_that_names_itself_is_freed():
    d = Beamd(extra=["--log-level", "info"])
    try:
        with Conn(d.socket) as c:
            c.hello()
            obj = Ids(c.hello_reply).obj()
            c.call("put", {"obj": obj, "data": b"x" * 1000, "objects": [obj]})
            c.call("release", {"objects": [obj]})
            assert c.call("status")["objects"]["count"] == 0
    finally:
        d.close()
