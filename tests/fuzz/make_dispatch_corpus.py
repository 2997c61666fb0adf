#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus for fuzz_dispatch (tests/fuzz/corpus/dispatch/):
short sessions of valid requests in the record format fuzz_dispatch.c
describes, one session per file. Usage: make_dispatch_corpus.py [DIR]"""

import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from beamkit.client import actor_id, object_id, pg_id  # noqa: E402
from beamkit.wire import request as req  # noqa: E402  (compact msgpack, as a real client writes it)


def write(client, data):
    return bytes([client]) + struct.pack(">H", len(data)) + data


def hangup(client):
    return bytes([0x80 | client])


def run(timers=False):
    return bytes([0xC1 if timers else 0xC0])


# Ids as the first three connections get them (conn 1, 2, 3; job = conn).
def obj(conn, seq, kind=0xFFFFFFFF):
    return object_id(1, conn, seq, conn, kind)


def actor(conn, seq):
    return actor_id(1, conn, seq, conn)


def pg(conn, seq):
    return pg_id(1, conn, seq, conn)


def create(conn, seq, **extra):
    p = {"actor": actor(conn, seq), "class_name": "A", "class_data": b"\x80\x05N.", "args": b"\x80\x05N.",
         "python": "/nonexistent/python3", "num_cpus": 1.0}
    p.update(extra)
    return p


SESSIONS = {
    # put, get, wait, hold/release, status, refs inside a value
    "objects": bytes([1]) + write(0, req(2, "put", {"obj": obj(1, 1), "data": b"value"})
                                  + req(3, "get", {"objs": [obj(1, 1)], "timeout_ms": 0})
                                  + req(4, "put", {"obj": obj(1, 2), "data": b"v2", "objects": [obj(1, 1)]})
                                  + req(5, "wait", {"objs": [obj(1, 1), obj(1, 2)], "num_returns": 2,
                                                    "timeout_ms": 10})
                                  + req(0, "release", {"objects": [obj(1, 1)]})
                                  + req(6, "status")),
    # an actor that cannot start: create, call, get the death, kill
    "actor": bytes([1]) + write(0, req(2, "create_actor", create(1, 1, name="named"))
                                + req(0, "submit", {"actor": actor(1, 1), "obj": obj(1, 2, 0), "method": "m",
                                                    "args": b"\x80\x05N."})
                                + req(3, "get", {"objs": [obj(1, 2, 0)], "timeout_ms": 5})
                                + req(4, "get_actor", {"name": "named"})
                                + req(5, "kill", {"actor": actor(1, 1), "no_restart": True})) + run(True),
    # an actor waiting for resources (more GPUs than the node has) with calls queued
    "pending": bytes([3]) + write(0, req(2, "create_actor", create(1, 1, num_gpus=8.0))
                                  + req(0, "submit", {"actor": actor(1, 1), "obj": obj(1, 2, 0), "method": "m",
                                                      "args": b""}))
    + write(1, req(2, "hold", {"actors": [actor(1, 1)], "objects": [obj(1, 2, 0)]})
            + req(3, "wait", {"objs": [obj(1, 2, 0)], "timeout_ms": 1})) + hangup(0) + run(True)
    + write(1, req(4, "get", {"objs": [obj(1, 2, 0)], "timeout_ms": 0})),
    # placement groups: create, table, ready, an actor in it, remove
    "groups": bytes([1]) + write(0, req(2, "pg_create", {"pg": pg(1, 1), "strategy": "PACK",
                                                        "bundles": [{"CPU": 1.0}, {"GPU": 1.0}], "name": "g"})
                                 + req(3, "pg_table", {"pg": pg(1, 1)})
                                 + req(4, "pg_ready", {"pg": pg(1, 1), "obj": obj(1, 2), "value": b"r"})
                                 + req(5, "create_actor", create(1, 3, placement_group=pg(1, 1), bundle_index=1,
                                                                 num_cpus=0.0, num_gpus=1.0))
                                 + req(6, "pg_remove", {"pg": pg(1, 1)})
                                 + req(7, "pg_table")),
    # two clients: one puts, the other holds and gets, the first hangs up
    "sharing": bytes([3]) + write(0, req(2, "put", {"obj": obj(1, 1), "data": b"shared"}))
    + write(1, req(2, "hold", {"objects": [obj(1, 1)]})) + hangup(0)
    + write(1, req(3, "get", {"objs": [obj(1, 1)], "timeout_ms": -1}) + req(0, "release", {"objects": [obj(1, 1)]})),
    # hello by hand, as each role; a worker hello that matches nothing
    "hello": bytes([0]) + write(0, req(1, "hello", {"role": "driver", "pid": 7, "logs": False}))
    + write(1, req(1, "hello", {"role": "ctl"}) + req(2, "status"))
    + write(2, req(1, "hello", {"role": "worker", "actor": actor(1, 9), "token": "0" * 32})),
    # worker-only ops from a driver, unknown ops, a second hello, msgid 0 failures
    "refused": bytes([1]) + write(0, req(2, "actor_ready", {"ok": True})
                                  + req(3, "task_done", {"obj": obj(1, 1, 0), "status": 0, "data": b""})
                                  + req(4, "nope") + req(0, "nope")
                                  + req(5, "hello", {"role": "driver"}) + req(0, "put", {"obj": 5})),
    # a call board handed over by a driver (only a worker may), bad fields
    "board": bytes([1]) + write(0, req(2, "board", {"fd": 0, "size": 4096}) + req(3, "board", {"fd": -1, "size": 1})
                                + req(4, "board", {}) + req(0, "board", {"fd": 2, "size": 4096})),
    # a frame split across writes, then a bad one
    "split": bytes([1]) + write(0, req(2, "status")[:3]) + write(0, req(2, "status")[3:])
    + write(0, struct.pack(">I", 3) + b"\x93\x00\x01"),
    # a client that does not read while many replies queue up
    "flood": bytes([1]) + write(0, req(2, "put", {"obj": obj(1, 1), "data": b"x" * 200})
                                + req(3, "get", {"objs": [obj(1, 1)] * 8, "timeout_ms": 0}) * 40),
}


def write_corpus(target, sessions):
    """Writes sessions, one file each, to argv[1] or tests/fuzz/corpus/<target>/."""
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "corpus", target)
    os.makedirs(out, exist_ok=True)
    for name, data in sessions.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write_corpus("dispatch", SESSIONS)
