# SPDX-License-Identifier: Apache-2.0
"""Values to bytes and back: cloudpickle, recording the ObjectRefs and
ActorHandles a value carries so the daemon can pin them while it travels.

Pickle protocol 5 with out-of-band buffers, as Ray: a numpy array's data is
not copied into the pickle but appended after it, and ``loads`` hands it back
as a read-only view of the received bytes (what Ray's zero-copy get gives),
so a large array is copied once less on each side. Each buffer handed back
starts at a 64-byte-aligned address, as in Ray's object store: where the
received bytes put it elsewhere, it is copied once to an aligned address
(``_beam`` places a received payload so that this is rare).

A large value may come as a read-only map of shared memory (shm.py): its
buffers are then views of the mapping, never copied.

``loads`` takes bytes or any bytes-like object: ``_beam`` hands a received
payload of 1 KiB or more over as a read-only memoryview of the frame it came
in, which the loaded value's buffers keep alive, not as a copy.

The format of a value with buffers: ``MAGIC``, the count n and the n buffer
lengths (little-endian u64), the pickle's length, the pickle, then the
buffers, each starting on a multiple of 64 bytes from the start of the data.
A value without buffers is the plain pickle.
"""

import ctypes
import pickle
import struct

import cloudpickle

from ray._private import refcount as _refcount

PROTOCOL = 5
MAGIC = b"BEAMOOB1"
ALIGN = 64


# Types the plain C pickler writes exactly as cloudpickle does (cloudpickle
# only adds by-value pickling of functions and classes, and these hold none):
# a small value made only of them skips the CloudPickler and the ref
# collection (it can carry no ObjectRef or ActorHandle). Exact types only: a
# subclass may reduce to anything.
_ATOMS = frozenset((type(None), bool, int, float, str, bytes))
_PLAIN_MAX = 32  # items checked at most, so a large container goes to cloudpickle at once


def _plain(value, budget):
    """budget left (>= 0) if value is made only of _ATOMS in tuples, lists
    and dicts, with at most budget items in all; -1 otherwise."""
    t = type(value)
    if t in _ATOMS:
        return budget
    if t is tuple or t is list:
        budget -= len(value)
        if budget < 0:
            return -1
        for item in value:
            budget = _plain(item, budget)
            if budget < 0:
                return -1
        return budget
    if t is dict:
        budget -= 2 * len(value)
        if budget < 0:
            return -1
        for k, v in value.items():
            budget = _plain(k, budget)
            if budget >= 0:
                budget = _plain(v, budget)
            if budget < 0:
                return -1
        return budget
    return -1


def dumps(value):
    """Returns (bytes, [object ids], [actor ids]) for value."""
    if _plain(value, _PLAIN_MAX) >= 0:  # (every small call's args: no list of parts made)
        return pickle.dumps(value, protocol=PROTOCOL), [], []
    parts, _, objs, actors = _dumps_pickled(value)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), objs, actors


def dumps_parts(value):
    """As dumps, with the bytes as ([parts], their total length), to be
    joined or written where they go (a large value's buffers are not copied
    until then: shm.py writes them straight into shared memory)."""
    if _plain(value, _PLAIN_MAX) >= 0:
        data = pickle.dumps(value, protocol=PROTOCOL)
        return [data], len(data), [], []
    return _dumps_pickled(value)


def _dumps_pickled(value):
    """dumps_parts of a value that is not plain: cloudpickle, collecting the
    refs and handles it carries and its pickle-5 buffers."""
    buffers = []
    with _refcount.collect() as found:
        data = cloudpickle.dumps(value, protocol=PROTOCOL, buffer_callback=buffers.append)
    if buffers:
        parts, size = _frame(data, buffers)
    else:
        parts, size = [data], len(data)
    return parts, size, _unique(found[0]), _unique(found[1])


def _frame(data, buffers):
    views = [b.raw() for b in buffers]
    head = MAGIC + struct.pack(f"<Q{len(views)}QQ", len(views), *[v.nbytes for v in views], len(data))
    parts = [head, data]
    offset = len(head) + len(data)
    for v in views:
        pad = -offset % ALIGN
        if pad:
            parts.append(b"\0" * pad)
        parts.append(v)
        offset += pad + v.nbytes
    return parts, offset


def _aligned(view):
    """view if it starts on a 64-byte address, else a read-only copy that does."""
    if view.nbytes == 0:
        return view
    addr = _address(view)
    if addr is not None and addr % ALIGN == 0:
        return view
    store = bytearray(view.nbytes + ALIGN)
    base = ctypes.addressof((ctypes.c_char * len(store)).from_buffer(store))
    off = -base % ALIGN
    out = memoryview(store)[off : off + view.nbytes]
    out[:] = view
    return out.toreadonly()


def _address(view):
    """The address of view's first byte (a contiguous byte view)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy.frombuffer(view, dtype=numpy.uint8).ctypes.data


def with_refs(params, objs, actors):
    """Adds the carried ids to a request's params (only when there are some)."""
    if objs:
        params["objects"] = objs
    if actors:
        params["actors"] = actors
    return params


def loads(data):
    """The value data (bytes or a bytes-like object) was dumped from."""
    if type(data) is bytes and not data.startswith(MAGIC):
        return pickle.loads(data)
    view = memoryview(data)
    if view[: len(MAGIC)] != MAGIC:
        return cloudpickle.loads(view)
    if not view.readonly:
        view = view.toreadonly()
    (n,) = struct.unpack_from("<Q", view, len(MAGIC))
    sizes = struct.unpack_from(f"<{n}QQ", view, len(MAGIC) + 8)
    offset = len(MAGIC) + 8 + 8 * (n + 1)
    pickled = view[offset : offset + sizes[n]]
    offset += sizes[n]
    buffers = []
    for size in sizes[:n]:
        offset += -offset % ALIGN
        buffers.append(_aligned(view[offset : offset + size]))
        offset += size
    return pickle.loads(pickled, buffers=buffers)


def _unique(ids):
    if len(ids) < 2:
        return ids
    return list(dict.fromkeys(ids))
