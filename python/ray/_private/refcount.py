# SPDX-License-Identifier: Apache-2.0
"""This process's reference counts for objects (kind 0) and actors (kind 1).

A process is one holder of an id while it has at least one live ObjectRef or
ActorHandle for it. The first ref of an id made here by ``.remote()`` or
``put`` is already held (the daemon counted the request that made it); the
first ref unpickled from elsewhere sends ``hold``. The last ref to die queues
a ``release``, which _beam batches (sent with a later request, or after
50 ms), except an actor's and an object's this process read from or wrote
into shared memory (``prompt``): their release is sent at once, so its
producer can write the memfd again for its next value (shm.py). Pickling
a ref inside a value records it, so the value pins it while it travels
(``collect``). A direct call's ref is not counted here while it is direct
(docs/DESIGN.md "Direct calls"): its death is direct.forget; promotion
counts it (``acquire(0, id, owned=True)``).
"""

import threading

_lock = threading.RLock()  # RLock: a __del__ may run during a locked section
_counts = ({}, {})
_prompt = set()  # object ids whose release is sent at once (values in shared memory)
_client = None
_epoch = 0
_tls = threading.local()
_direct = None  # ray._private.direct, set by it when direct calls are on


def _direct_hook(client, kind, id_bytes):
    """A released object may be an actor's last call through beamd (kind
    0); an actor's last handle first closes its direct calls (kind 1)."""
    if kind == 0:
        _direct.beamd_released(client, id_bytes)
    else:
        _direct.actor_released(client, id_bytes)


def attach(client):
    """Starts counting for a new connection; refs from an older one go quiet."""
    global _client, _epoch
    with _lock:
        _client = client
        _epoch += 1
        _counts[0].clear()
        _counts[1].clear()
        _prompt.clear()
        return _epoch


def detach():
    global _client, _epoch
    with _lock:
        _client = None
        _epoch += 1
        _counts[0].clear()
        _counts[1].clear()
        _prompt.clear()


def prompt(id_bytes):
    """The release of object id_bytes, when this process's last ref to it
    dies, is sent at once: the value is in shared memory, which its producer
    writes again only once no one holds it (shm.py's pool)."""
    with _lock:
        if id_bytes in _counts[0]:
            _prompt.add(id_bytes)


def acquire(kind, id_bytes, owned=False):
    """Counts one more live ref; returns the epoch it belongs to (0 if no
    runtime). A borrowed first ref tells the daemon this process holds it."""
    with _lock:
        client = _client
        if client is None:
            return 0
        counts = _counts[kind]
        n = counts.get(id_bytes, 0)
        counts[id_bytes] = n + 1
        epoch = _epoch
        if n == 0 and not owned:
            # a release still queued would cancel this hold: send it first
            try:
                client.flush()
                key = "objects" if kind == 0 else "actors"
                client.send("hold", {key: [id_bytes]})
            except Exception:
                pass
        return epoch


def release(kind, id_bytes, epoch):
    with _lock:
        client = _client
        if client is None or epoch != _epoch:
            return
        counts = _counts[kind]
        n = counts.get(id_bytes, 0)
        if n <= 1:
            counts.pop(id_bytes, None)
            now = kind == 1
            if kind == 0 and id_bytes in _prompt:
                _prompt.discard(id_bytes)
                now = True
            try:
                if _direct is not None:
                    _direct_hook(client, kind, id_bytes)
                client.release(kind, id_bytes)
                if now:
                    # an actor's last handle: sent now, so an idle process
                    # does not keep the worker (and its GPUs) alive; a value
                    # in shared memory: so its memfd can be written again
                    client.flush()
            except Exception:
                pass
        else:
            counts[id_bytes] = n - 1


def live_count(kind):
    with _lock:
        return len(_counts[kind])


class collect:
    """Context manager: records the ids pickled inside it (per thread)."""

    def __enter__(self):
        self.prev = getattr(_tls, "found", None)
        self.found = ([], [])
        _tls.found = self.found
        return self.found

    def __exit__(self, *exc):
        _tls.found = self.prev
        return False


def note_contained(kind, id_bytes):
    found = getattr(_tls, "found", None)
    if found is not None:
        found[kind].append(id_bytes)
