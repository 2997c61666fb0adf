#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus for fuzz_link (tests/fuzz/corpus/link/): short
sessions of a fake member's link messages in the record format fuzz_link.c
describes, one session per file. Usage: make_link_corpus.py [DIR]"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_dispatch_corpus import actor, create, obj, pg, req, run, write_corpus  # noqa: E402

from beamkit.client import object_id  # noqa: E402  (make_dispatch_corpus put tests/python on the path)
from beamkit.wire import pack  # noqa: E402

JOIN0, JOIN1, BOTH, ANSWER = 1, 2, 4, 8  # flags (byte 0)


def sealed(member, op, params):
    body = pack([2, op, params])
    return bytes([member]) + struct.pack(">H", len(body)) + body


def raw(data, member=None):
    s = 0x40 if member is None else 0x41 | (member << 1)
    return bytes([s]) + struct.pack(">H", len(data)) + data


def reconnect(peer):
    return bytes([0x80 | peer])


def join(ip="127.0.0.9", seq=1, **over):
    p = {"max_frame": 1 << 16, "node_id": bytes([seq]) * 28, "node_ip": ip, "hostname": "m",
         "socket": "/nonexistent/m.sock", "resources": [["CPU", 40000], ["node:" + ip, 10000]], "gpus": ["0"]}
    p.update(over)
    return p


def client(member, vconn, msgid, op, params=None):
    """A request from remote client vconn, as the member relays it."""
    return sealed(member, "client_frame", {"vconn": vconn, "frame": req(msgid, op, params)[4:]})


def opened(member, vconn, pid=77):
    return sealed(member, "client_open", {"vconn": vconn, "pid": pid, "uid": 0}) + \
        client(member, vconn, 1, "hello", {"role": "driver", "pid": pid})


ON_M0 = {"resources": {"node:127.0.0.9": 0.001}}
LOCAL_OBJ = object_id(2, 1, 1, 1)  # made by the first client of member 0 (the head's member 2)
ON_M1 = {"resources": {"node:127.0.0.10": 0.001}}

SESSIONS = {
    # the member's own join, a heartbeat, a client that comes and goes
    "join": bytes([0]) + sealed(0, "join", join()) + sealed(0, "heartbeat", {}) + opened(0, 1)
    + client(0, 1, 2, "status") + sealed(0, "client_closed", {"vconn": 1}) + run(),
    # joins that must be refused, each on a new link
    "bad_joins": bytes([0]) + sealed(0, "join", {k: v for k, v in join().items() if k != "node_id"}) + reconnect(0)
    + sealed(0, "join", join(node_id=b"x" * 27)) + reconnect(0)
    + sealed(0, "join", join(node_id="x" * 28)) + reconnect(0)
    + sealed(0, "join", join(resources=[["CPU"]])) + reconnect(0)
    + sealed(0, "join", join(gpus=[1])) + reconnect(0)
    + sealed(0, "join", join(node_ip=5)) + reconnect(0) + sealed(0, "join", join(seq=2)),
    # an actor placed on the member: spawn answered, a call, its release
    "remote_actor": bytes([JOIN0 | ANSWER]) + opened(0, 1)
    + client(0, 1, 2, "create_actor", create(1, 1, num_cpus=1.0, **ON_M0))
    + client(0, 1, 0, "submit", {"actor": actor(1, 1), "obj": obj(1, 2, 0), "method": "m", "args": b""})
    + client(0, 1, 3, "kill", {"actor": actor(1, 1), "no_restart": True}) + run(True),
    # the member reports its worker by hand: started, output, exit
    "remote_worker": bytes([JOIN0]) + opened(0, 1)
    + client(0, 1, 2, "create_actor", create(1, 1, num_cpus=1.0, **ON_M0))
    + sealed(0, "worker_started", {"actor": actor(1, 1), "pid": 4242})
    + sealed(0, "worker_log", {"actor": actor(1, 1), "stream": 1, "text": "(A pid=4242) hi"})
    + sealed(0, "worker_exit", {"actor": actor(1, 1), "pid": 4242, "status": 1, "signal": 0})
    + client(0, 1, 3, "get", {"objs": [obj(1, 2, 0)], "timeout_ms": 0}),
    # two members, a group spread over both, actors in it, one member lost
    "two_members": bytes([JOIN0 | JOIN1 | BOTH | ANSWER]) + opened(0, 1)
    + client(0, 1, 2, "pg_create", {"pg": pg(1, 1), "strategy": "STRICT_SPREAD",
                                    "bundles": [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]})
    + client(0, 1, 3, "create_actor", create(1, 2, placement_group=pg(1, 1), bundle_index=1, num_cpus=1.0))
    + client(0, 1, 4, "create_actor", create(1, 3, num_cpus=1.0, **ON_M1)) + run() + reconnect(1) + run()
    + client(0, 1, 5, "pg_table") + client(0, 1, 6, "pg_remove", {"pg": pg(1, 1)}),
    # objects through a remote client
    "objects": bytes([JOIN0]) + opened(0, 1) + opened(0, 2, pid=78)
    + client(0, 1, 2, "put", {"obj": obj(1, 1), "data": b"value"})
    + client(0, 2, 2, "hold", {"objects": [obj(1, 1)]})
    + client(0, 2, 3, "get", {"objs": [obj(1, 1)], "timeout_ms": 0})
    + client(0, 1, 3, "wait", {"objs": [obj(1, 1)], "num_returns": 1, "timeout_ms": 5})
    + sealed(0, "client_closed", {"vconn": 1}) + client(0, 2, 4, "status"),
    # bytes before the handshake, and unsealed bytes on a sealed link
    "raw": bytes([JOIN0]) + raw(b"\x00\x00\x00\x05\x93\x02\xa4auth\x80") + raw(b"\xff" * 8)
    + raw(b"\x00\x00\x00\x03\x93\x02\xa1x", member=0) + reconnect(0) + reconnect(2) + sealed(0, "heartbeat", {}),
    # a member's local calls: a submit record (for an actor the head does not
    # know: its object fails), its task_done as a frame record, a board
    # record (a client that is no worker: ignored), then a batch
    # whose second record is malformed, which ends the link
    "local_batch": bytes([JOIN0]) + opened(0, 1)
    + sealed(0, "local_batch", {"msgs": [
        [1, 1, req(2, "submit", {"actor": actor(1, 1), "obj": LOCAL_OBJ, "method": "m", "args": b"",
                                 "objects": [], "actors": []})[4:]],
        [0, 1, req(0, "task_done", {"obj": LOCAL_OBJ, "status": 0, "data": b"r"})[4:]],
        [2, 1, struct.pack("<QQQ", 3, 2, 2)]]})
    + client(0, 1, 3, "get", {"objs": [LOCAL_OBJ], "timeout_ms": 0})
    + sealed(0, "local_batch", {"msgs": [[0, 1, req(4, "status")[4:]], [3, 1, b"x"]]}),
    # malformed messages after the join, each ending its link
    "bad_messages": bytes([JOIN0]) + sealed(0, "client_open", {"vconn": "1", "pid": 1, "uid": 0}) + reconnect(0)
    + sealed(0, "worker_exit", {"actor": b"a" * 15, "pid": 1, "status": 0, "signal": 0}) + reconnect(0)
    + sealed(0, "client_frame", {"vconn": 1}) + reconnect(0)
    + sealed(0, "join", join(seq=3)) + reconnect(0)
    + opened(0, 1) + opened(0, 1) + reconnect(0)
    + sealed(0, "nope", {}),
}


if __name__ == "__main__":
    write_corpus("link", SESSIONS)
