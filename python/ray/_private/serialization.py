# SPDX-License-Identifier: Apache-2.0
"""Values to bytes and back: cloudpickle, recording the ObjectRefs and
ActorHandles a value carries so the daemon can pin them while it travels.

A value with pickle-5 buffers (numpy arrays) travels framed: the pickle,
then each buffer, every section at a 64-byte offset. Loading copies each
buffer to a 64-byte-aligned address, so the arrays ray.get returns are
aligned as Ray's object store aligns them (64 bytes), whatever address the
received bytes have. A value without buffers is a plain pickle.
"""

import ctypes
import struct

import cloudpickle

from ray._private import refcount as _refcount

PROTOCOL = 5


ALIGNMENT = 64
# a pickle of protocol 2+ starts with 0x80: a frame never looks like one
_MAGIC = b"\x00BEAMOOB"
_HEAD = struct.Struct("<8sIQ")  # magic, buffer count, pickle length


def _pad(n):
    return -n % ALIGNMENT


def dumps(value):
    """Returns (bytes, [object ids], [actor ids]) for value."""
    buffers = []
    with _refcount.collect() as found:
        data = cloudpickle.dumps(value, protocol=PROTOCOL, buffer_callback=buffers.append)
    if buffers:
        data = _frame(data, [b.raw() for b in buffers])
    return data, _unique(found[0]), _unique(found[1])


def _frame(payload, raws):
    head = _HEAD.pack(_MAGIC, len(raws), len(payload)) + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
    parts = [head, bytes(_pad(len(head))), payload]
    at = len(head) + _pad(len(head)) + len(payload)
    for r in raws:
        parts.append(bytes(_pad(at)))
        at += _pad(at)
        parts.append(r)
        at += r.nbytes
    return b"".join(parts)


def _aligned_copy(view):
    """A writable 64-byte-aligned copy of view (a 1-d byte memoryview)."""
    n = view.nbytes
    store = bytearray(n + ALIGNMENT)
    addr = ctypes.addressof((ctypes.c_char * len(store)).from_buffer(store))
    off = -addr % ALIGNMENT
    out = memoryview(store)[off:off + n]
    out[:] = view
    return out


def _unframe(data):
    view = memoryview(data).cast("B")
    _, count, plen = _HEAD.unpack_from(view, 0)
    sizes = struct.unpack_from(f"<{count}Q", view, _HEAD.size)
    at = _HEAD.size + 8 * count
    at += _pad(at)
    payload = view[at:at + plen]
    at += plen
    buffers = []
    for n in sizes:
        at += _pad(at)
        buffers.append(_aligned_copy(view[at:at + n]))
        at += n
    return payload, buffers


def with_refs(params, objs, actors):
    """Adds the carried ids to a request's params (only when there are some)."""
    if objs:
        params["objects"] = objs
    if actors:
        params["actors"] = actors
    return params


def loads(data):
    if data[:len(_MAGIC)] == _MAGIC:
        payload, buffers = _unframe(data)
        return cloudpickle.loads(payload, buffers=buffers)
    return cloudpickle.loads(data)


def _unique(ids):
    if len(ids) < 2:
        return ids
    return list(dict.fromkeys(ids))
