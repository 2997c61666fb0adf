# SPDX-License-Identifier: Apache-2.0
"""Direct calls (docs/DESIGN.md, "Direct calls"): a driver's plain calls to
a serial actor on its node go to the actor's worker over a unix socket, not
through beamd. On unless ``BEAM_DIRECT_CALLS=0``.

The caller's side (``submit``, ``entry``, ``promote``, ``forget``,
``actor_released``) keeps one ``_Actor`` per actor this driver created with
the options the rule allows; the worker's side is ``Server``, started by the
``__beam_direct_open__`` call that beamd carries. Once the handshake is
done, the socket is a ``_beam.DirectConn`` at both ends: beam frames of
push envelopes, written and read in C with the GIL let go only around the
wait:

- caller -> worker: ``call`` {obj, method, args, forgets} a call (its
  return id, the method, the pickled (args, kwargs), results forgotten),
  ``forget`` {objs} forgotten results only;
- worker -> caller: ``result`` {obj, status, data} a result (status as a
  get reply's: 0 value, 1 RayTaskError) or status PROMOTE (data empty):
  the value carries refs, or is large enough for shared memory: read it
  from beamd.
"""

import collections
import hashlib
import hmac
import math
import os
import pickle as _pickle
import select
import socket
import struct
import sys
import threading
import time

from ray._private import refcount as _refcount
from ray._private import serialization as _ser
from ray._private import shm as _shm
from ray._private import utils as _utils

ON = os.environ.get("BEAM_DIRECT_CALLS", "1") != "0"

OPEN = "__beam_direct_open__"
BARRIER = "__beam_direct_barrier__"
RESULT = "__beam_direct_result__"
PROMOTE = -1  # a result status: promote the ref, read it from beamd
STATUS_ACTOR_DIED = 2

_NONCE = 16
_HANDSHAKE_S = 2.0
_NO_FORGETS = ()  # a call's forgets when none wait (encoded as an empty array)
_FORGETS_MAX = 64  # forgotten results sent alone once this many wait
_READABLE = select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR
_WRITE_WAIT_MS = 10  # a driver's full socket: how long one wait for room (or a result) lasts


def _conn(sock):
    """The admitted socket as a _beam.DirectConn, which owns its fd now."""
    from _beam import DirectConn  # here, not at the top: `import ray` works without the extension

    return DirectConn(sock.detach())


# ---------------------------------------------------------------- worker side


class _WConn:
    """One admitted caller on the worker's side: its DirectConn (never
    blocks: what the socket does not take is written when it can)."""

    def __init__(self, dc, conn_id):
        self.dc = dc
        self.fd = dc.fileno()
        # The same socket again, for the early wake (Server.serve_forever):
        # its EPOLLOUT edge comes when the caller takes bytes we sent.
        self.early_fd = os.dup(self.fd)
        self.id = conn_id
        self.executed = 0


class Server:
    """The worker's direct listener and its main loop once opened: the main
    thread waits on its callers' sockets and on a pipe a helper thread (the
    one reader of beamd's pushes from then on) writes to; every call, from
    beamd or direct, runs on the main thread, one at a time."""

    def __init__(self, worker):
        self.worker = worker
        self.secret = os.urandom(32)
        self.address = "\0beam-direct-%d-%s" % (os.getpid(), os.urandom(8).hex())
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(64)
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.lock = threading.Lock()
        self.pushes = collections.deque()  # beamd's pushes, in order
        self.fresh = collections.deque()  # admitted callers not yet served
        self.conns = {}  # fd -> _WConn
        self.by_id = {}  # conn id -> _WConn
        self.next_id = 1
        self.retained = {}  # obj -> (method, outcome, conn id): until forgotten or promoted
        self.wanted = {}  # obj -> the __beam_direct_result__ call waiting for it
        self.barrier = None  # (conn id, n, params) holding beamd's pushes
        self.refused = 0
        self.poller = select.epoll()  # the main loop's (serve_forever)
        threading.Thread(target=self._accept, name="beam-direct-accept", daemon=True).start()

    def reply(self):
        return {"address": self.address, "secret": self.secret, "node_id": self.worker.rt.node_id}

    # threads ---------------------------------------------------------------
    def _wake(self):
        try:
            os.write(self.wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the main thread is waking anyway

    def start_reading_beamd(self, client, gone):
        self._gone = gone

        def read():
            while True:
                try:
                    push = client.next_push()
                except ConnectionError:
                    push = ("__gone__", None)
                if push is None:
                    continue
                with self.lock:
                    self.pushes.append(push)
                self._wake()
                if push[0] == "__gone__":
                    return

        threading.Thread(target=read, name="beam-direct-beamd", daemon=True).start()

    def _accept(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            if not _utils.peer_uid_allowed(sock):
                self.refused += 1
                sock.close()
                continue
            threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock):
        try:
            sock.settimeout(_HANDSHAKE_S)
            nonce = os.urandom(_NONCE)
            sock.sendall(nonce)
            proof = _recv_exact(sock, 32)
            if not hmac.compare_digest(proof, hmac.new(self.secret, nonce, hashlib.sha256).digest()):
                raise ConnectionError("bad proof")
        except (OSError, ConnectionError):
            self.refused += 1
            sock.close()
            return
        # known before the caller hears its id: a barrier that names it
        # (sent right after) must find it
        with self.lock:
            conn = _WConn(_conn(sock), self.next_id)
            self.next_id += 1
            self.by_id[conn.id] = conn
        try:
            # 5 bytes into a socket nothing was written to since the nonce the
            # caller read: the socket (non-blocking now) takes them whole
            sent = os.write(conn.fd, b"\1" + struct.pack("<I", conn.id))
        except OSError:
            sent = 0
        if sent != 5:
            self.by_id.pop(conn.id, None)
            self.refused += 1
            conn.dc.close()
            return
        with self.lock:
            self.fresh.append(conn)
        self._wake()

    # the main loop ---------------------------------------------------------
    def serve_forever(self):
        """One epoll on the wake pipe and the callers' sockets (a socket asks
        for EPOLLOUT only while its DirectConn holds unwritten bytes), and on
        each socket's early_fd for the early wake: the edge the kernel makes
        when the caller reads a result we sent (room to write), which wakes
        this thread while the caller is still at work, so that its next call
        finds it awake. A wait in poll for POLLIN alone is filtered from that
        wake; on a VM whose idle vCPUs halt, the late wake-up of a halted one
        is most of a call's cost when caller and worker run on two CPUs
        (docs/DESIGN.md, "Direct calls": the early wake). The early events
        themselves are ignored."""
        self.poller.register(self.wake_r, select.EPOLLIN)
        conns = self.conns
        while True:
            for fd, ev in self.poller.poll():
                conn = conns.get(fd)
                if conn is None:
                    if fd == self.wake_r:
                        self._drain_wake()
                    continue
                if ev & select.EPOLLOUT and not conn.dc.flush():
                    self.poller.modify(fd, select.EPOLLIN)
                if ev & _READABLE:
                    msgs = conn.dc.read(0)
                    if msgs is None:
                        self._close(conn)
                    else:
                        for m in msgs:
                            self._direct(conn, m)
                if self.pushes or self.barrier is not None:
                    self._run_pushes()

    def _drain_wake(self):
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self.lock:
            while self.fresh:
                c = self.fresh.popleft()
                self.conns[c.fd] = c
                self.poller.register(c.fd, select.EPOLLIN)
                self.poller.register(c.early_fd, select.EPOLLOUT | select.EPOLLET)
        self._run_pushes()

    def _close(self, conn):
        self.conns.pop(conn.fd, None)
        self.poller.unregister(conn.fd)
        self.poller.unregister(conn.early_fd)
        os.close(conn.early_fd)
        self.by_id.pop(conn.id, None)
        conn.dc.close()
        for obj in [o for o, r in self.retained.items() if r[2] == conn.id and o not in self.wanted]:
            del self.retained[obj]
        self._run_pushes()

    def _barrier_holds(self):
        if self.barrier is None:
            return False
        conn_id, n, params = self.barrier
        conn = self.by_id.get(conn_id)
        if conn is not None and conn.executed < n:
            return True
        self.barrier = None
        self.worker.finish(params, (True, None))
        return False

    def _run_pushes(self):
        while (self.pushes or self.barrier is not None) and not self._barrier_holds():
            with self.lock:
                if not self.pushes:
                    return
                op, params = self.pushes.popleft()
            if op == "__gone__":
                self._gone(0)
            if op != "call":
                continue
            method = params["method"]
            if method == BARRIER:
                (conn_id, n), _ = _ser.loads(params["args"])
                self.barrier = (conn_id, n, params)
            elif method == RESULT:
                self._promote(params)
            else:
                self.worker.call(params)

    def _promote(self, params):
        obj = bytes(params["obj"])
        kept = self.retained.pop(obj, None)
        if kept is None:
            self.wanted[obj] = params  # not run yet: answered when it has
            return
        self.worker.finish(dict(params, method=kept[0]), kept[1])

    def _direct(self, conn, msg):
        """One frame from a caller. A call starts here and ends when its
        result is sent (or handed to the __beam_direct_result__ call
        waiting for it): the one place where a direct call runs."""
        op, p = msg
        if op != "call":
            if op == "forget":
                self._forget(p[0])
            return
        obj, method, args, forgets = p
        if forgets:
            self._forget(forgets)
        # -- a direct call starts
        outcome = self.worker.run_direct(obj, method, args)
        conn.executed += 1
        try:
            self.worker.client.flush()  # the call's refs died with it
        except ConnectionError:
            self._gone(0)
        wanted = self.wanted.pop(obj, None)
        if wanted is not None:
            self.worker.finish(dict(wanted, method=method), outcome)
            return  # -- finished: its result sent through beamd
        self.retained[obj] = (method, outcome, conn.id)
        status, data = self._pickle(method, outcome)
        if status != PROMOTE:
            self.worker.board.pushed()  # before the send: its caller may ask beamd's status once it has it
        try:
            left = conn.dc.result(obj, status, data)
        except ValueError:  # over the frame limit: beamd's path says so
            left = conn.dc.result(obj, PROMOTE, None)
        # -- finished: its result sent (or kept to send when the socket takes it)
        if left:
            self.poller.modify(conn.fd, select.EPOLLIN | select.EPOLLOUT)

    def _forget(self, objs):
        for obj in objs:
            self.retained.pop(obj, None)

    def _pickle(self, method, outcome):
        ok, value = outcome
        if ok and type(value) in _ser._ATOMS:  # no refs inside: dumped as _ser.dumps does
            data = _pickle.dumps(value, protocol=_ser.PROTOCOL)
            if len(data) < _shm.MIN_BYTES:
                return 0, data
        try:
            if not ok:
                raise value
            parts, size, objs, actors = _ser.dumps_parts(value)
            if objs or actors or (size >= _shm.MIN_BYTES and self.worker.rt.shm):
                return PROMOTE, None  # refs to hold, or a value for shared memory: through beamd
            return 0, parts[0] if len(parts) == 1 else b"".join(parts)
        except Exception as e:
            err = self.worker._error(method, e)
            try:
                return 1, _ser.dumps(err)[0]
            except Exception as pickle_error:
                err = self.worker._error(method, TypeError(f"the error could not be pickled: {pickle_error}"))
                return 1, _ser.dumps(err)[0]


def _recv_exact(sock, n):
    return _utils.recv_exact(sock, n, lambda: ConnectionError("the peer closed the connection"))


# ---------------------------------------------------------------- caller side

_actors = {}  # actor id -> _Actor (actors this driver made that the rule allows)
_refs = {}  # obj -> _Actor: direct refs not promoted, live here
_lasts = {}  # obj -> _Actor whose last call through beamd it is
_OPEN_WAIT_S = 0.05  # how long a .remote() waits for the open call's answer (then it comes later)


class _Actor:
    """One actor's direct calls in this driver. Its lock guards the fields;
    one thread at a time reads the socket (``reading``), with the lock let
    go, and the others wait on ``cv`` for what it files."""

    def __init__(self, actor_id):
        self.id = actor_id
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.reading = False
        self.waiting = 0  # threads in cv.wait
        self.direct = False  # calls go direct now
        self.off = False  # never again (not on this node, or its socket ended)
        self.last = None  # the id of the last call through beamd (not held: the user's ref holds it)
        self.last_done = True  # its result came (seen in _beam's table, or when its ref died)
        self.opening = None  # the ObjectRef of the __beam_direct_open__ call, until answered
        self.conn = None  # the socket's _beam.DirectConn, once connected
        self.address = None  # the worker's socket address
        self.conn_id = 0
        self.sent = 0
        self.pending = set()  # direct calls sent, result not come
        self.results = {}  # obj -> (status, data) come, not taken
        self.forgets = collections.deque()


def register(actor_id):
    """The driver created this actor with options the rule allows."""
    _refcount._direct = _this
    _actors[bytes(actor_id)] = _Actor(bytes(actor_id))


def reset():
    """ray.shutdown: every direct connection closes."""
    for a in list(_actors.values()):
        _close(a)
    _actors.clear()
    _refs.clear()
    _lasts.clear()


def _close(a):
    if a.conn is not None:
        a.conn.close()
        a.conn = None
    a.direct = False


def _done(client, a):
    """Whether the last call through beamd has its result (so the worker
    ran every earlier call of ours); a result never pushed here, or whose
    ref died unseen, counts as not come."""
    if not a.last_done:
        entry = client.wait_result(a.last, 0)
        a.last_done = entry is True or type(entry) is tuple
    return a.last_done


def eligible(method, num_returns):
    """Whether a method's calls may go direct when they carry no refs (one
    return, not a ``__`` method): read once per ActorMethod."""
    return num_returns == 1 and method[:2] != "__"


def submit(rt, actor_id, ok, method, data, oid, object_ref):
    """Sends the call direct and returns its ObjectRef when the rule allows
    it now (ok: the method is eligible and the args carry no refs); else
    None, after what keeps the order (a barrier), and the caller submits it
    through beamd and calls note_beamd."""
    a = _actors.get(actor_id)
    if a is None:
        return None
    if ok and a.direct:  # the hot path: the socket is up and the order rule holds
        with a.lock:
            if a.direct:  # (a.direct: a.conn is set and a.off is not)
                return _send_call(a, method, data, oid, object_ref)
    allowed = ok and not a.off
    with a.lock:  # opening, the switch to direct, or the barrier before a call through beamd
        if not a.direct:
            if not allowed:
                return None
            if a.conn is None:
                _open_step(rt, a, object_ref)
            if a.conn is None or not _done(rt.client, a):
                return None
            a.direct = True  # the last call through beamd has come: the worker ran them all
        if not allowed or a.conn is None:
            _barrier(rt, a)
            a.direct = False
            return None
        return _send_call(a, method, data, oid, object_ref)


def _send_call(a, method, data, oid, object_ref):
    """Sends one direct call (a.lock held, a.direct) and returns its ref."""
    ref = object_ref._here(oid)
    _refs[oid] = a
    a.pending.add(oid)
    a.sent += 1
    conn = a.conn
    fs = a.forgets  # most often the last call's one forget (a sync loop's)
    forgets = _NO_FORGETS if not fs else [fs.popleft()] if len(fs) == 1 else _take_forgets(a)
    if conn.call(oid, method, data, forgets):
        _send_rest(a, conn)
    return ref


def note_beamd(actor_id, oid):
    a = _actors.get(actor_id)
    if a is not None:
        _lasts.pop(a.last, None)
        a.last, a.last_done = oid, False
        _lasts[oid] = a


def beamd_released(client, obj):
    """The driver's last ref of a call through beamd died: if it was an
    actor's last one, whether its result had come is read now."""
    a = _lasts.pop(obj, None)
    if a is not None and a.last == obj:
        _done(client, a)


def _take_forgets(a):
    """The forgets queued so far, as many as there are now (a forget may
    append meanwhile: it holds no lock of ours)."""
    fs = a.forgets  # (popped only with a.lock held)
    return [fs.popleft() for _ in range(len(fs))]


def _send(a, op, params):
    """Sends a frame and returns once it is written whole (the lock held: a
    barrier through beamd may count it); while the socket is full, reads
    what came unless another thread is reading. A socket that ended drops
    it: its end is read by the next _read."""
    conn = a.conn
    if conn.send(op, params):
        _send_rest(a, conn)


def _send_rest(a, conn):
    """Waits until what the socket did not take of a frame is written (the
    lock held), reading what comes meanwhile unless another thread is."""
    left = conn.pending
    while left and a.conn is conn and not conn.ended:
        if a.reading:
            left = conn.wait_writable(_WRITE_WAIT_MS)
        else:
            _read(a, _WRITE_WAIT_MS / 1000)
            left = conn.pending


def _submit_beamd(rt, a, method, args, oid=None):
    oid = oid or rt.ids.object_id()
    rt.client.submit({"actor": a.id, "obj": oid, "method": method, "args": _ser.dumps(args)[0]})
    return oid


def _barrier(rt, a):
    """The worker runs this connection's direct calls sent so far before any
    call beamd sends it after this one."""
    if a.conn is None or a.sent == 0:
        return
    oid = _submit_beamd(rt, a, BARRIER, ((a.conn_id, a.sent), {}))
    rt.client.release(0, oid)


def _open_step(rt, a, object_ref):
    """One step of opening: submit the open call once a call through beamd
    has come and the last one has (the worker is free of ours), then
    connect once its answer has come (waiting for it at most _OPEN_WAIT_S
    here; else a later call looks again)."""
    from ray._private import worker as _w  # here: worker imports this module

    if a.opening is None:
        if a.last is None or not _done(rt.client, a):
            return
        oid = _submit_beamd(rt, a, OPEN, ((), {}))
        a.opening = object_ref(oid, _owned=True)
        note_beamd(a.id, oid)
        entry = _w._get_one(rt.client, a.opening, int(_OPEN_WAIT_S * 1000))
    else:
        entry = _w._get_one(rt.client, a.opening, 0)
    if entry is None:
        return
    a.opening = None
    a.last_done = True
    info = None
    if entry[0] == 0:
        info = _ser.loads(entry[1])
    if not info or bytes(info["node_id"]) != bytes(rt.node_id):
        a.off = True
        return
    try:
        sock, a.conn_id = connect(info["address"], info["secret"])
    except (OSError, ConnectionError):
        a.off = True
        return
    a.address = info["address"]
    a.conn = _conn(sock)


def connect(address, secret, timeout=5.0):
    """Connects to a worker's direct socket and proves the secret; returns
    (socket, connection id)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address)
        nonce = _recv_exact(sock, _NONCE)
        sock.sendall(hmac.new(bytes(secret), nonce, hashlib.sha256).digest())
        ok = _recv_exact(sock, 5)
        if ok[:1] != b"\1":
            raise ConnectionError("the worker refused the direct connection")
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock, struct.unpack("<I", ok[1:])[0]


def _read(a, timeout):
    """Reads what comes within timeout s (None: until something does), the
    lock held on entry and exit but let go meanwhile; files results; at the
    socket's end, fails the pending calls."""
    conn = a.conn
    if conn is None:
        return
    a.reading = True
    try:
        # in C: the lock let go while it waits, the results filed once it is held again
        came = conn.read_results(a.lock, a.pending, a.results, -1 if timeout is None else math.ceil(timeout * 1000))
    finally:
        a.reading = False
        if a.waiting:
            a.cv.notify_all()
    if came is None:
        _ended(a)


def _ended(a):
    """The socket ended: the pending calls fail with beamd's cause."""
    _close(a)
    a.off = True
    if not a.pending:
        return
    from ray._private import worker as _w  # here: worker imports this module
    from ray._private.object_ref import ObjectRef  # here: object_ref reaches this module through refcount

    rt = _w.runtime()
    try:
        probe = ObjectRef(_submit_beamd(rt, a, "__ray_ready__", ((), {})), _owned=True)
    except ConnectionError as e:
        raise _w._lost_connection(e) from None
    entry = _w._get_one(rt.client, probe, -1)
    if entry is None or entry[0] == 0:
        entry = (STATUS_ACTOR_DIED, b"The actor died unexpectedly before finishing this task.")
    else:
        entry = (entry[0], bytes(entry[1]))
    # a forget may run at any point here (a ref's death: GC, another thread)
    # and takes its obj out of a.pending: walk a set no forget reaches
    pending, a.pending = a.pending, set()
    for obj in pending:
        if obj in _refs:  # not forgotten meanwhile: its result is kept for its get
            a.results[obj] = entry


def is_direct(obj):
    return obj in _refs


def entry(obj, deadline):
    """The (status, data) of a direct ref (None at the deadline, a
    time.monotonic() or None); False when beamd has it (promoted)."""
    a = _refs.get(obj)
    if a is None:
        return False
    promote_now = tried = False
    with a.lock:
        if deadline is None and not a.reading and a.conn is not None and obj in a.pending:
            _read(a, None)  # the hot path: a sync call's get, the result not come yet
        while True:
            got = a.results.get(obj)
            if got is not None:
                if got[0] != PROMOTE:
                    return got
                promote_now = True
                break
            if obj not in a.pending or a.conn is None:
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if tried or a.reading:
                    return None
                left = 0
            tried = True
            if a.reading:
                a.waiting += 1
                try:
                    a.cv.wait(left)
                finally:
                    a.waiting -= 1
            else:
                _read(a, left)
    if promote_now:
        promote(obj)
    return False


def promote(obj):
    """The ref leaves this process: beamd gets its object first. A value
    or a task error that came here is put under the ref's id (the worker
    forgets it), so it outlives the worker as through beamd; otherwise the
    worker answers a call whose return id is obj with the kept outcome (a
    call not done)."""
    a = _refs.pop(obj, None)
    if a is None:
        return
    _refcount.acquire(0, obj, owned=True)  # its ref is counted from now on (refcount.py)
    from ray._private import worker as _w  # here: worker imports this module

    rt = _w.runtime()
    with a.lock:
        got = a.results.pop(obj, None)
        a.pending.discard(obj)
        try:
            if got is not None and got[0] in (0, 1):
                a.forgets.append(obj)
                params = {"obj": obj, "status": 1} if got[0] else {"obj": obj}
                _w.send_value(rt, "put", params, [got[1]], len(got[1]))
            else:
                _submit_beamd(rt, a, RESULT, ((), {}), oid=obj)
        except ConnectionError:
            pass  # beamd is gone: what uses the ref next says so


def forget(obj):
    """The ObjectRef of a direct ref died (its one ref: ObjectRef.__del__,
    which may run in any thread at any point: no lock of ours is waited
    for). True when it was one."""
    a = _refs.pop(obj, None)
    if a is None:
        return False
    a.results.pop(obj, None)
    a.pending.discard(obj)
    a.forgets.append(obj)
    if len(a.forgets) >= _FORGETS_MAX and a.conn is not None and a.lock.acquire(blocking=False):
        try:
            _send(a, "forget", {"objs": _take_forgets(a)})
        finally:
            a.lock.release()
    return True


def actor_released(client, actor_id):
    """The driver's last handle died: a barrier first, so the actor (which
    ends once its calls through beamd are done) runs the direct ones."""
    a = _actors.pop(actor_id, None)
    if a is None or a.conn is None:
        return
    if a.sent:
        from ray._private import worker as _w  # here: worker imports this module

        oid = _w.runtime().ids.object_id()
        client.submit({"actor": a.id, "obj": oid, "method": BARRIER, "args": _ser.dumps(((a.conn_id, a.sent), {}))[0]})
        client.release(0, oid)
    if not a.pending:
        _close(a)


_this = sys.modules[__name__]
