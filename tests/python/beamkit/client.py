# SPDX-License-Identifier: Apache-2.0
"""The raw client: a unix connection to beamd spoken by hand (wide msgpack,
see wire.pack), ids made as a client makes them, the checks of an error
reply, and a watcher client that keeps asking for status."""

import os
import socket
import struct
import threading
import time

from . import wire
from .procs import wait_until


def request(msgid, op, params=None):
    """A request frame as Conn writes it (wide msgpack)."""
    return wire.request(msgid, op, params, wide=True)


class Conn(wire.FrameSocket):
    """One raw connection to beamd: send frames or bytes, read messages."""

    def __init__(self, path, timeout=5.0):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(path)
        super().__init__(sock)
        self.next_id = 1
        self.hello_reply = None

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, value):
        self.send_raw(wire.message(value, wide=True))

    def recv(self):
        """The next whole message, or None at EOF. socket.timeout if none comes."""
        body = self.read_body(whole=True)
        if body is None:
            return None
        value, end = wire.unpack(body)
        assert end == len(body), "beamd sent stray bytes after a value"
        return value

    def request(self, op, params=None, msgid=None):
        """Sends a request and returns its reply [1, msgid, error, result]
        (pushes before it are skipped), or None if the connection closed."""
        if msgid is None:
            msgid = self.next_id
            self.next_id += 1
        self.send([0, msgid, op, {} if params is None else params])
        while True:
            m = self.recv()
            if m is None or (m[0] == 1 and m[1] == msgid):
                return m

    def call(self, op, params=None):
        """A request that must succeed: its result."""
        r = self.request(op, params)
        assert r is not None, f"{op}: the connection closed"
        assert r[2] is None, f"{op}: {r[2]}"
        return r[3]

    def hello(self, role="driver"):
        self.hello_reply = self.call("hello", {"role": role, "pid": os.getpid()})
        return self.hello_reply

    def drain_until_closed(self, timeout=5.0):
        """Every message beamd sends until it closes the connection."""
        self.sock.settimeout(timeout)
        out = []
        while True:
            m = self.recv()
            if m is None:
                return out
            out.append(m)


class Ids:
    """Ids as a client makes them (docs/DESIGN.md, Ids) from its hello."""

    def __init__(self, hello):
        self.node = hello["node_index"]
        self.conn = hello["conn"]
        self.job = hello["job"]
        self.seq = 0

    def _next(self):
        self.seq += 1
        return self.seq

    def obj(self):
        return object_id(self.node, self.conn, self._next(), self.job)

    def actor(self):
        return actor_id(self.node, self.conn, self._next(), self.job)

    def pg(self):
        return pg_id(self.node, self.conn, self._next(), self.job)


def object_id(node, conn, seq, job, kind=0xFFFFFFFF):
    return struct.pack(">IIQIII", node, conn, seq, job, kind, 0)


def actor_id(node, conn, seq, job):
    return struct.pack(">IIII", node, conn, seq, job)


def pg_id(node, conn, seq, job):
    return struct.pack(">II", node, conn) + seq.to_bytes(6, "big") + struct.pack(">I", job)


def expect_error(reply, code, *words):
    """reply is [1, msgid, {code, message}, nil] with that code and words in the message."""
    assert reply is not None, "the connection closed instead of replying"
    assert reply[0] == 1 and reply[3] is None, reply
    err = reply[2]
    assert isinstance(err, dict) and set(err) == {"code", "message"}, reply
    assert err["code"] == code, reply
    assert err["message"], reply
    for w in words:
        assert w in err["message"], reply
    return err["message"]


def expect_closed_with_error(conn, *words, timeout=5.0):
    """beamd sends an error push (maybe after replies) and closes."""
    msgs = conn.drain_until_closed(timeout)
    pushes = [m for m in msgs if m[0] == 2 and m[1] == "error"]
    assert pushes, f"no error push before the close: {msgs}"
    text = pushes[-1][2]["message"]
    assert isinstance(text, str) and text
    for w in words:
        assert w in text, text
    return text


class Watcher(threading.Thread):
    """A second client that keeps asking for status while a test misbehaves;
    it records the slowest answer and any failure. It is a ctl client of
    the daemon from the moment the constructor returns, so a snapshot of
    the daemon's clients taken after it counts the watcher."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.errors = []
        self.max_latency = 0.0
        self.count = 0
        self.connected = threading.Event()  # hello answered, or gave up
        self.start()
        self.connected.wait(15)

    def run(self):
        try:
            conn = Conn(self.path, timeout=10)
            conn.hello("ctl")
        except Exception as e:  # noqa: BLE001 - recorded for the test to report
            self.errors.append(f"watcher could not connect: {e!r}")
            return
        finally:
            self.connected.set()
        while not self.stopping.wait(0.005):
            t0 = time.monotonic()
            try:
                r = conn.request("status")
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"status failed: {e!r}")
                return
            dt = time.monotonic() - t0
            with self.lock:
                if r is None or r[2] is not None:
                    self.errors.append(f"status answered {r!r:.200}")
                    return
                self.max_latency = max(self.max_latency, dt)
                self.count += 1
        conn.close()

    def take(self):
        """(answers, slowest, errors) since the last take, once there is
        at least one answer or error."""
        wait_until(lambda: self.count > 0 or self.errors or not self.is_alive(), 5)
        with self.lock:
            out = (self.count, self.max_latency, list(self.errors))
            self.count, self.max_latency = 0, 0.0
            return out

    def stop(self):
        self.stopping.set()
        self.join(10)


def pack(v):
    """v as Conn writes it (wide msgpack: see wire.pack)."""
    return wire.pack(v, wide=True)


def base_params(op, ids, pg=None):
    """Valid params for op: with one field made wrong, only that field is at fault."""
    if op == "put":
        return {"obj": ids.obj(), "data": b"x", "objects": [], "actors": []}
    if op == "get":
        return {"objs": [ids.obj()], "timeout_ms": 0}
    if op == "wait":
        return {"objs": [ids.obj()], "num_returns": 1, "timeout_ms": 0}
    if op == "submit":
        return {"actor": ids.actor(), "obj": ids.obj(), "method": "m", "args": b"", "objects": [], "actors": []}
    if op == "create_actor":
        # a python that does not exist: should a wrong field slip through,
        # no worker starts
        return {
            "actor": ids.actor(),
            "class_name": "C",
            "class_data": b"",
            "args": b"",
            "python": "/nonexistent/python3",
            "cwd": "/",
            "name": "",
            "noset_cuda": False,
            "num_cpus": 0.0,
            "num_gpus": 0.0,
            "memory": 0.0,
            "resources": {},
            "sys_path": [],
            "env": {},
            "objects": [],
            "actors": [],
            "bundle_index": -1,
            "capture_child_tasks": False,
        }
    if op == "kill":
        return {"actor": ids.actor(), "no_restart": True}
    if op in ("hold", "release"):
        return {"objects": [ids.obj()], "actors": [ids.actor()]}
    if op == "pg_create":
        return {"pg": ids.pg(), "strategy": "PACK", "bundles": [{"CPU": 0.001}], "name": "", "detached": False}
    if op == "pg_ready":
        return {"pg": pg, "obj": ids.obj(), "value": b"v"}
    if op == "pg_remove":
        return {"pg": ids.pg()}
    if op == "pg_table":
        return {"pg": ids.pg()}
    if op == "get_actor":
        return {"name": "no-such-actor"}
    raise AssertionError(op)
