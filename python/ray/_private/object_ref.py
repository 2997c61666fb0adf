# SPDX-License-Identifier: Apache-2.0
"""ObjectRef: a handle to one value in the daemon's object table.

Each live ObjectRef in a process counts toward that process's hold on the
object; when the last one dies the process releases it (batched by _beam).
Refs are hashable and compare by id, as Ray's are, and pickle by id: a ref
unpickled in another process makes that process a holder too.
"""

import concurrent.futures
import threading

from ray._private import ids as _ids
from ray._private import refcount as _refcount


class ObjectRef:
    """A reference to a (possibly not yet computed) value."""

    __slots__ = ("_id", "_epoch", "__weakref__")

    def __init__(self, id_bytes, _owned=False):
        if not isinstance(id_bytes, (bytes, bytearray)) or len(id_bytes) != 28:
            raise ValueError("ObjectRef takes a 28-byte id")
        self._id = bytes(id_bytes)
        direct = _refcount._direct
        if direct is not None and self._id in direct._refs:
            direct.promote(self._id)  # a second ref of a direct call's: beamd's object first
        self._epoch = _refcount.acquire(0, self._id, owned=_owned)

    @classmethod
    def _here(cls, id_bytes):
        """The one ref of a direct call's id this process just made (bytes,
        28 long): the constructor without its checks, and not counted while
        it is direct (its death is the forget; promotion counts it:
        docs/DESIGN.md "Direct calls")."""
        ref = _new(cls)
        ref._id = id_bytes
        ref._epoch = _refcount._epoch
        return ref

    def __del__(self):
        try:
            direct = _refcount._direct
            # (ids start again with each beamd: a ref of an earlier session is not this one's)
            if (
                direct is not None
                and self._id in direct._refs
                and self._epoch == _refcount._epoch
                and direct.forget(self._id)
            ):
                return  # a direct call's result: the worker forgets it, beamd never had it
            _refcount.release(0, self._id, self._epoch)
        except Exception:
            pass  # interpreter shutdown

    # --- Ray's accessors ---
    def binary(self):
        return self._id

    def hex(self):
        return self._id.hex()

    def is_nil(self):
        return self._id == b"\xff" * 28

    @classmethod
    def nil(cls):
        return cls(b"\xff" * 28)

    @classmethod
    def from_random(cls):
        import os

        return cls(os.urandom(28))

    @classmethod
    def size(cls):
        return 28

    def job_id(self):
        return _ids.JobID(self._id[16:20])

    def task_id(self):
        return _ids.TaskID(self._id[:24])

    def owner_address(self):
        return None

    def call_site(self):
        return ""

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and other._id == self._id

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._id)

    def __repr__(self):
        return f"ObjectRef({self.hex()})"

    __str__ = __repr__

    def __reduce__(self):
        if _refcount._direct is not None and _refcount._direct.is_direct(self._id):
            _refcount._direct.promote(self._id)  # it leaves this process: beamd's object first
        _refcount.note_contained(0, self._id)
        return (_deserialize_object_ref, (self._id,))

    # --- futures ---
    def future(self):
        """A concurrent.futures.Future resolved by a background ray.get."""
        fut = concurrent.futures.Future()

        def resolve():
            # here, not at the top: ray imports this module (through worker), a cycle at import time
            import ray

            try:
                fut.set_result(ray.get(self))
            except BaseException as e:  # noqa: B902 - handed to the future
                fut.set_exception(e)

        threading.Thread(target=resolve, daemon=True, name="beam-future").start()
        return fut

    def __await__(self):
        import asyncio

        return asyncio.wrap_future(self.future()).__await__()

    def as_future(self, _internal=False):
        import asyncio

        return asyncio.wrap_future(self.future())


_new = object.__new__


def _deserialize_object_ref(id_bytes):
    return ObjectRef(id_bytes)
