# SPDX-License-Identifier: Apache-2.0
"""Id types with Ray's sizes and hex forms, and how this process makes new ones.

Every id starts with the 4-byte index of its home node (docs/DESIGN.md, Ids).
A client makes actor and object ids itself from the (node index, connection,
job) triple its daemon gave it at hello and a local counter, so creating an
actor or calling a method needs no round trip.
"""

import itertools
import os
import struct


class BaseID:
    """Raw id bytes with Ray's accessors: ``binary()``, ``hex()``, equality and
    hashing by value."""

    SIZE = 0
    __slots__ = ("_bytes",)

    def __init__(self, id_bytes):
        if not isinstance(id_bytes, (bytes, bytearray)) or len(id_bytes) != self.SIZE:
            raise ValueError(f"{type(self).__name__} takes {self.SIZE} bytes, got {id_bytes!r:.80}")
        self._bytes = bytes(id_bytes)

    @classmethod
    def from_hex(cls, hex_id):
        return cls(bytes.fromhex(hex_id))

    @classmethod
    def from_random(cls):
        return cls(os.urandom(cls.SIZE))

    @classmethod
    def nil(cls):
        return cls(b"\xff" * cls.SIZE)

    @classmethod
    def size(cls):
        return cls.SIZE

    def is_nil(self):
        return self._bytes == b"\xff" * self.SIZE

    def binary(self):
        return self._bytes

    def hex(self):
        return self._bytes.hex()

    def __eq__(self, other):
        return type(other) is type(self) and other._bytes == self._bytes

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._bytes)

    def __repr__(self):
        return f"{type(self).__name__}({self.hex()})"

    __str__ = __repr__

    def __reduce__(self):
        return (type(self), (self._bytes,))


class NodeID(BaseID):
    SIZE = 28


class JobID(BaseID):
    """As Ray's: the job's number little-endian (job 1 is 01000000)."""

    SIZE = 4

    @classmethod
    def from_int(cls, value):
        return cls(struct.pack("<I", value))

    def int(self):
        return struct.unpack("<I", self._bytes)[0]


class ActorID(BaseID):
    SIZE = 16

    @property
    def job_id(self):
        return JobID(self._bytes[12:16])


class PlacementGroupID(BaseID):
    SIZE = 18


class WorkerID(BaseID):
    SIZE = 28


class TaskID(BaseID):
    SIZE = 24


KIND_CALL = 0
KIND_PUT = 0xFFFFFFFF


class IdMaker:
    """Makes this client's ids: home node, connection, job, then a counter.
    ``next()`` on itertools.count is atomic under the GIL, so threads may
    share one maker."""

    def __init__(self, node_index, conn, job):
        self.node_index = node_index
        self.conn = conn
        self.job = job
        # packed big-endian below, this gives a JobID's bytes as Ray's (little-endian)
        self._job = int.from_bytes(struct.pack("<I", job), "big")
        self._seq = itertools.count(1)

    def object_id(self, kind=KIND_CALL):
        return struct.pack(">IIQIII", self.node_index, self.conn, next(self._seq), self._job, kind, 1)

    def actor_id(self):
        return struct.pack(">IIII", self.node_index, self.conn, next(self._seq) & 0xFFFFFFFF, self._job)

    def placement_group_id(self):
        seq = next(self._seq)
        return struct.pack(">II", self.node_index, self.conn) + seq.to_bytes(6, "big") + struct.pack(">I", self._job)
