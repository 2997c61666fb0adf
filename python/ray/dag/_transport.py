# SPDX-License-Identifier: Apache-2.0
"""The wire of a compiled graph: direct sockets between the processes of one
graph, frames on them, values to frames and back.

A connection is a stream socket (a unix socket in the abstract namespace
between processes of one node, TCP on the node IP between nodes) opened once
at compile time and authenticated with the graph's secret (HMAC of a nonce
the listener sends; the secret itself travels only through beamd). The
listener side (Acceptor) reads every peer's proof at once, without blocking,
each within HANDSHAKE_S, and closes a unix peer of another uid (not ours nor
root's, by SO_PEERCRED) before sending it anything: an idle or foreign peer
delays no other. On a connection go frames:

    header  <BBHIQQ>: kind, flags, nbufs, key, seq, payload length
    nbufs * <Q>: out-of-band buffer lengths
    payload (pickle protocol 5), then each buffer

``key`` names the graph task the frame belongs to (or the output), ``seq``
the execution. Values are pickled with protocol 5; a CPU torch tensor and a
numpy array travel as out-of-band buffers (no copy into the pickle; the
receiver reads them straight into their own buffers). A value marked for a
communicator is pickled with its tensors replaced by (shape, dtype) metadata
(flag COMM); the tensors go through the communicator after the frame.

Between processes of one node (a unix socket, once ``enable_shm``), a
frame whose buffers come to SHM_MIN bytes or more (flag SHM) carries only
its header, lengths and pickle; its buffers are written into a memfd slot
of the writer's Lane and a new read-only open of that slot comes with the
frame's first byte (SCM_RIGHTS). The reader maps it and gets read-only
views (numpy arrays are views of the slot; a CPU tensor is copied out of
it). A slot is written again only once no one else has it open or mapped
(shm.Memfd.alone), so a value a reader holds is never overwritten; with
every slot held the frame goes through the socket. A device tensor reaches
host memory through the caller's pinned tensors.Stage when one is given.

Owns no threads. A Conn is used by one reading thread at a time and one
writing thread at a time.
"""

import array
import collections
import errno
import hashlib
import hmac
import io
import mmap
import os
import pickle
import select
import socket
import struct
import sys
import time
import warnings

from ray._private import shm, tensors
from ray._private import utils as _utils

HDR = struct.Struct("<BBHIQQ")
LEN = struct.Struct("<Q")

# kinds
VALUE = 0  # the pickled output of a task, or the graph's input
ERROR = 1  # a pickled RayTaskError standing for the output
# flags
F_COMM = 1  # tensors follow through the communicator; payload is (metas, inner)
F_SHM = 2  # the buffers are in the memfd slot whose fd came with the frame (SCM_RIGHTS)

# Out-of-band buffers of this many bytes or more (in all) between two
# processes of one node go through a shared-memory slot, not the socket
# (measured: docs/DESIGN.md, "Compiled graphs").
SHM_MIN = int(os.environ.get("BEAM_CGRAPH_SHM_MIN", 1 << 20))
SHM_SLOTS = 11  # slots a writer keeps per connection unless told (max_inflight_executions + 1)
SHM_SLOT_BYTES = 4 << 30  # and bytes in them, at most
_SHM_ON = os.environ.get("BEAM_SHM", "1") != "0"
_SHM_ALIGN = 64
_ANC = socket.CMSG_SPACE(4 * struct.calcsize("i"))

_SMALL = 1 << 16  # frames under this go out in one joined write
_NONCE = 16


class Timeout(Exception):
    """A read did not finish before its deadline; the partial frame is kept."""


class Closed(Exception):
    """The peer closed the connection (or it was shut down here)."""


class Err:
    """An upstream error standing for a value (what an ERROR frame carries,
    unpickled): a task whose argument is one skips and forwards it, and the
    driver's get raises its exception."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


# -- values -----------------------------------------------------------------


def _rebuild_tensor(buf, dtype, shape, device):
    import torch

    if buf is None:
        t = torch.empty(shape, dtype=dtype)
    elif isinstance(buf, memoryview) and buf.readonly:
        # a read-only view of a shared-memory slot: a tensor over it would
        # fault on its first write, so a CPU tensor gets its own copy (one
        # memcpy; no socket) and a device tensor is uploaded from it
        src = _np().frombuffer(buf, dtype=_np().uint8)
        if device != "cpu" and _device_ok(torch, device):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "non-writable buffer": it is only read
                host = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)
            return tensors.to_device(host, device)
        t = torch.empty(len(src), dtype=torch.uint8)
        t.numpy()[:] = src
        t = t.view(dtype).reshape(shape)
    else:
        t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)
    if device != "cpu" and _device_ok(torch, device):
        t = tensors.to_device(t, device)
    return t


def _device_ok(torch, device):
    mod = getattr(torch, device, None)
    return mod is not None and mod.is_available()


def _np():
    import numpy

    return numpy


def _tensor_reduce(t, stage=None):
    import torch

    dtype, shape, device = t.dtype, tuple(t.shape), t.device.type
    t = t.detach()
    if device != "cpu":
        t = stage.to_host(t) if stage is not None else t.cpu()
    if t.numel() == 0:
        return _rebuild_tensor, (None, dtype, shape, device)
    flat = t.contiguous().reshape(-1).view(torch.uint8).numpy()
    return _rebuild_tensor, (pickle.PickleBuffer(flat), dtype, shape, device)


def _is_tensor(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor) and type(obj).__module__.startswith("torch")


class _Pickler(pickle.Pickler):
    """Protocol 5; CPU tensors out of band. Tensors listed in ``comm`` (a
    list) are replaced by persistent ids and left to the communicator."""

    def __init__(self, f, buffers, comm=None, stage=None):
        super().__init__(f, protocol=5, buffer_callback=buffers.append)
        self._comm = comm
        self._stage = stage

    def persistent_id(self, obj):
        if self._comm is not None and _is_tensor(obj):
            self._comm.append(obj)
            return ("T", len(self._comm) - 1, tuple(obj.shape), obj.dtype)
        return None

    def reducer_override(self, obj):
        if _is_tensor(obj):
            return _tensor_reduce(obj, self._stage)
        return NotImplemented


def _cloud_pickler():
    import cloudpickle

    class _CloudPickler(cloudpickle.CloudPickler):
        def __init__(self, f, buffers, comm=None, stage=None):
            super().__init__(f, protocol=5, buffer_callback=buffers.append)
            self._comm = comm
            self._stage = stage

        def persistent_id(self, obj):
            return _Pickler.persistent_id(self, obj)

        def reducer_override(self, obj):
            if _is_tensor(obj):
                return _tensor_reduce(obj, self._stage)
            return super().reducer_override(obj)

    return _CloudPickler


_CLOUD = None


def dumps(value, comm=None, stage=None):
    """value -> (payload bytes, [buffers]); tensors go to ``comm`` (a list)
    instead when it is given. A device tensor's bytes are copied to host
    memory through ``stage`` (a tensors.Stage, whose spans the buffers then
    are until its holder resets it) when given, else by torch's own copy.
    Plain pickle first, cloudpickle for what plain pickle refuses (lambdas,
    classes defined in __main__)."""
    global _CLOUD
    f = io.BytesIO()
    buffers = []
    try:
        _Pickler(f, buffers, comm, stage).dump(value)
    except Exception:
        if _CLOUD is None:
            _CLOUD = _cloud_pickler()
        f = io.BytesIO()
        buffers.clear()
        if comm is not None:
            comm.clear()
        _CLOUD(f, buffers, comm, stage).dump(value)
    return f.getvalue(), buffers


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, buffers, tensors):
        super().__init__(f, buffers=buffers)
        self._tensors = tensors

    def persistent_load(self, pid):
        return self._tensors[pid[1]]


def loads(payload, buffers, tensors=None):
    if tensors is None:
        return pickle.loads(payload, buffers=buffers)
    return _Unpickler(io.BytesIO(payload), buffers, tensors).load()


# -- connections ------------------------------------------------------------


def unix_address(graph_id, index):
    return "\0beam-cgraph-%d-%s-%d" % (os.getpid(), graph_id, index)


def listen(graph_id, node_ip):
    """A unix listener and a TCP listener on node_ip; returns
    (sockets, {"unix": name, "tcp": (ip, port)})."""
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = unix_address(graph_id, id(u))
    u.bind(name)
    u.listen(64)
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.bind((node_ip, 0))
    t.listen(64)
    return [u, t], {"unix": name, "tcp": t.getsockname()}


def _tune(sock):
    if sock.family == socket.AF_INET:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
        except OSError:
            pass


def _recv_exact(sock, n):
    return _utils.recv_exact(sock, n, lambda: Closed("the peer closed the connection during the handshake"))


def connect(address, same_node, secret, src, timeout=30.0):
    """Connect to a listener, prove the secret, say who we are (src, an int).
    Returns a Conn."""
    if same_node:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = address["unix"]
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        target = tuple(address["tcp"])
    sock.settimeout(timeout)
    try:
        sock.connect(target)
        nonce = _recv_exact(sock, _NONCE)
        sock.sendall(hmac.new(secret, nonce, hashlib.sha256).digest() + struct.pack("<I", src))
        if _recv_exact(sock, 1) != b"\1":
            raise ConnectionError("the compiled graph peer refused the connection")
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    _tune(sock)
    return Conn(sock)


HANDSHAKE_S = 2.0  # an accepted peer has this long to prove the secret
MAX_HANDSHAKES = 128  # unproven peers held at once; past it the oldest is dropped


class _Handshake:
    """One accepted peer that has its nonce and owes its proof."""

    __slots__ = ("sock", "nonce", "got", "deadline")

    def __init__(self, sock, nonce, deadline):
        self.sock, self.nonce, self.got, self.deadline = sock, nonce, b"", deadline


class Acceptor:
    """Accepts peers on a graph's listeners and checks their proofs, all of
    them at once: each accepted socket is sent its nonce at once and has
    ``deadline_s`` to answer; reads never block, so a peer that sends
    nothing delays no other, and is dropped when its time is up. A unix peer
    of another uid (not ours, not root's) is closed at accept, before it is
    sent anything. Beyond ``max_pending`` unproven peers the oldest is
    dropped (a real peer answers within a round trip). Used by one thread;
    the listeners may be closed by another, which ends it."""

    def __init__(self, listeners, secret, deadline_s=HANDSHAKE_S, max_pending=MAX_HANDSHAKES):
        self.listeners = list(listeners)
        for ls in self.listeners:
            ls.setblocking(False)
        self.secret = secret
        self.deadline_s = deadline_s
        self.max_pending = max_pending
        self.pending = {}  # fd -> _Handshake, oldest first
        self.refused = 0  # peers closed without a proven handshake (for tests)

    def poll(self, timeout):
        """Waits up to ``timeout`` s for progress; returns the peers proven
        meanwhile as [(src, Conn)]. Raises Closed once a listener was closed
        or shut down (the acceptor is then done: call close())."""
        now = time.monotonic()
        for h in [h for h in self.pending.values() if h.deadline <= now]:
            self._drop(h)
        if self.pending:
            timeout = max(0.0, min(timeout, min(h.deadline for h in self.pending.values()) - now))
        p = select.poll()
        for ls in self.listeners:
            if ls.fileno() < 0:
                raise Closed("the graph's listeners are closed")
            p.register(ls.fileno(), select.POLLIN)
        for fd in self.pending:
            p.register(fd, select.POLLIN)
        by_fd = {ls.fileno(): ls for ls in self.listeners}
        proven = []
        for fd, ev in p.poll(timeout * 1000):
            ls = by_fd.get(fd)
            if ls is not None:
                if ev & (select.POLLNVAL | select.POLLERR | select.POLLHUP):
                    raise Closed("the graph's listeners are closed")
                self._accept_all(ls)
            elif fd in self.pending:
                got = self._read(self.pending[fd])
                if got is not None:
                    proven.append(got)
        return proven

    def _accept_all(self, ls):
        while True:
            try:
                sock, _ = ls.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return  # the peers held now may free some
                raise Closed(str(e)) from None
            if not _utils.peer_uid_allowed(sock):
                self.refused += 1
                sock.close()
                continue
            sock.setblocking(False)
            nonce = os.urandom(_NONCE)
            try:
                sent = sock.send(nonce)  # a new socket's empty buffer takes it whole
            except OSError:
                sent = 0
            if sent != _NONCE:
                self.refused += 1
                sock.close()
                continue
            while len(self.pending) >= self.max_pending:
                self._drop(next(iter(self.pending.values())))
            self.pending[sock.fileno()] = _Handshake(sock, nonce, time.monotonic() + self.deadline_s)

    def _read(self, h):
        try:
            chunk = h.sock.recv(32 + 4 - len(h.got))
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(h)
            return None
        h.got += chunk
        if len(h.got) < 32 + 4:
            return None
        del self.pending[h.sock.fileno()]
        sock = h.sock
        if not hmac.compare_digest(h.got[:32], hmac.new(self.secret, h.nonce, hashlib.sha256).digest()):
            self.refused += 1
            sock.close()
            return None
        try:
            sock.setblocking(True)
            sock.sendall(b"\1")
        except OSError:
            self.refused += 1
            sock.close()
            return None
        _tune(sock)
        return struct.unpack("<I", h.got[32:])[0], Conn(sock)

    def _drop(self, h):
        self.pending.pop(h.sock.fileno(), None)
        self.refused += 1
        h.sock.close()

    def close(self):
        """Closes every peer still owing its proof."""
        for h in list(self.pending.values()):
            self._drop(h)


def _shm_layout(lens):
    """Where buffers of these lengths lie in a slot (each at a 64-byte
    boundary), and the bytes they span."""
    offs, end = [], 0
    for n in lens:
        offs.append(end)
        end = (end + n + _SHM_ALIGN - 1) // _SHM_ALIGN * _SHM_ALIGN
    return offs, end


def _slot_size(total):
    """A new slot's size: the next power of two (1 MiB at least), so values
    whose size varies a little from step to step fit the same slot."""
    return max(1 << 20, 1 << (total - 1).bit_length())


class Lane:
    """The writing end's shared-memory slots on one connection between two
    processes of a node: memfds (shm.Memfd, never named in a file system)
    that a frame's buffers are written into, the reader being handed a new
    read-only open of the slot with the frame (SCM_RIGHTS). That open, in
    flight in the socket and then held by the reader's mapping, is what
    keeps a slot from being written again: a slot is reused only once no
    one else has it open or mapped (Memfd.alone, a write lease), so a value
    a reader still holds is never overwritten. At most ``max_slots`` slots
    and SHM_SLOT_BYTES bytes: past them, with every slot held, a frame goes
    through the socket as before (the socket's own backpressure). Used by
    the connection's writing thread only."""

    def __init__(self, max_slots=SHM_SLOTS):
        self.max_slots = max(1, max_slots)
        self.slots = []  # shm.Memfd
        self.sent = 0  # frames sent through a slot (for tests and benches)

    def take(self, total):
        """A slot of at least total bytes no one else holds, or None."""
        by_size = sorted(self.slots, key=lambda m: m.size)
        for m in by_size:
            if m.size >= total and m.alone():
                return m
        size = _slot_size(total)
        held = sum(m.size for m in self.slots)
        for m in by_size:  # idle ones too small make room
            if len(self.slots) < self.max_slots and held + size <= SHM_SLOT_BYTES:
                break
            if m.alone():
                self.slots.remove(m)
                held -= m.size
                m.close()
        if len(self.slots) >= self.max_slots or held + size > SHM_SLOT_BYTES:
            return None
        m = shm.Memfd(size)
        self.slots.append(m)
        return m

    def close(self):
        while self.slots:
            self.slots.pop().close()


def _map_slot(fd, lens):
    """The buffers of a frame from its slot (fd, which is closed): read-only
    views of one new mapping, unmapped once the last of them is gone."""
    offs, total = _shm_layout(lens)
    try:
        st = os.fstat(fd)
        if st.st_size < total:
            raise Closed("a compiled graph's shared-memory slot is smaller than its frame")
        mapping = shm._map(fd, total, mmap.PROT_READ)  # not populated: a reader pays for the pages it reads
    finally:
        os.close(fd)
    view = memoryview(mapping).cast("B").toreadonly()
    return [view[o : o + n] for o, n in zip(offs, lens)]


class Frame:
    __slots__ = ("kind", "flags", "key", "seq", "payload", "buffers")

    def __init__(self, kind, flags, key, seq, payload, buffers):
        self.kind, self.flags, self.key, self.seq = kind, flags, key, seq
        self.payload, self.buffers = payload, buffers


class Conn:
    """One end of a graph connection: frames out, frames in.

    ``read(deadline)`` keeps a partially read frame across a Timeout, so the
    next read goes on where it stopped."""

    def __init__(self, sock):
        self.sock = sock
        self.fd = sock.fileno()
        self._unix = sock.family == socket.AF_UNIX
        self._fds = collections.deque()  # slots' fds received ahead of their frames
        self.lane = None  # a Lane once enable_shm() turned it on
        self._rbuf = bytearray()
        self._state = None  # a frame being read: [hdr fields, lens, payload, bufs, index, offset]
        self._timeout = None
        self.closed = False

    def enable_shm(self, max_slots=SHM_SLOTS):
        """Large buffers written on this connection go through shared memory
        (a Lane): only between processes of one node (a unix socket), and not
        with BEAM_SHM=0."""
        if self._unix and _SHM_ON and self.lane is None:
            self.lane = Lane(max_slots)

    # writing
    def send(self, kind, key, seq, payload, buffers=(), flags=0):
        nb = len(buffers)
        views = [memoryview(b).cast("B") for b in buffers]
        if self.lane is not None and nb and sum(v.nbytes for v in views) >= SHM_MIN:
            if self._send_shm(kind, key, seq, payload, views, flags):
                return
        head = HDR.pack(kind, flags, nb, key, seq, len(payload))
        if nb:
            head += b"".join(LEN.pack(v.nbytes) for v in views)
        total = len(head) + len(payload) + sum(v.nbytes for v in views)
        try:
            if total <= _SMALL:
                self.sock.sendall(b"".join([head, payload, *views]))
            else:
                self.sock.sendall(head + payload)
                for v in views:
                    self.sock.sendall(v)
        except OSError as e:
            raise Closed(str(e)) from None

    def _send_shm(self, kind, key, seq, payload, views, flags):
        """The frame with its buffers in a slot; False (nothing sent) when no
        slot is free or one cannot be made: the caller sends it whole."""
        lens = [v.nbytes for v in views]
        offs, total = _shm_layout(lens)
        try:
            m = self.lane.take(total)
            if m is None:
                return False
            m.prepare()
            for v, off in zip(views, offs):
                shm._copy(m.view[off : off + v.nbytes], v)  # a large one in chunks, past the cache
            rfd = os.open(f"/proc/self/fd/{m.fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        data = HDR.pack(kind, flags | F_SHM, len(views), key, seq, len(payload))
        data += b"".join(LEN.pack(n) for n in lens) + payload
        try:
            sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [rfd]))])
            if sent < len(data):
                self.sock.sendall(memoryview(data)[sent:])
        except OSError as e:
            raise Closed(str(e)) from None
        finally:
            os.close(rfd)
        self.lane.sent += 1
        return True

    def shutdown(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self):
        self.closed = True
        self.shutdown()
        try:
            self.sock.close()
        except OSError:
            pass
        if self._state is not None and self._state.fd is not None:
            self._fds.append(self._state.fd)
            self._state.fd = None
        while self._fds:
            os.close(self._fds.popleft())
        if self.lane is not None:
            self.lane.close()

    # reading
    def _set_timeout(self, deadline):
        t = None if deadline is None else max(0.0, deadline - time.monotonic())
        if t == 0.0:
            t = 1e-6
        if t != self._timeout:
            self.sock.settimeout(t)
            self._timeout = t

    def _fill(self, n, deadline):
        while len(self._rbuf) < n:
            self._set_timeout(deadline)
            try:
                chunk = self._recv(max(n - len(self._rbuf), 1 << 16))
            except socket.timeout:
                raise Timeout() from None
            except OSError as e:
                raise Closed(str(e)) from None
            if not chunk:
                raise Closed("the peer closed the connection")
            self._rbuf += chunk

    def _recv(self, n):
        """Up to n bytes; on a unix socket, with the fds that came with them
        (queued in order: each is the slot of the F_SHM frame it came with)."""
        if not self._unix:
            return self.sock.recv(n)
        data, anc, msg_flags, _ = self.sock.recvmsg(n, _ANC)
        for level, typ, raw in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(raw[: len(raw) - len(raw) % fds.itemsize])
                self._fds.extend(fds)
        if msg_flags & socket.MSG_CTRUNC:
            raise Closed("a compiled graph frame came with more fds than expected")
        return data

    def _take(self, n):
        data = bytes(self._rbuf[:n])
        del self._rbuf[:n]
        return data

    def read(self, deadline=None):
        """The next frame; Timeout past ``deadline`` (time.monotonic()), Closed
        at EOF."""
        st = self._state
        if st is None:
            self._fill(HDR.size, deadline)
            kind, flags, nb, key, seq, plen = HDR.unpack(self._take(HDR.size))
            st = self._state = _Partial(Frame(kind, flags, key, seq, None, []), nb, plen)
            if flags & F_SHM:  # its slot's fd came with its first byte
                if not self._fds:
                    raise Closed("a compiled graph frame in shared memory came without its slot")
                st.fd = self._fds.popleft()
        if st.lens is None:
            self._fill(LEN.size * st.nbufs, deadline)
            raw = self._take(LEN.size * st.nbufs)
            st.lens = [LEN.unpack_from(raw, i * LEN.size)[0] for i in range(st.nbufs)]
        frame = st.frame
        if frame.payload is None:
            self._fill(st.plen, deadline)
            frame.payload = self._take(st.plen)
        if st.fd is not None:
            fd, st.fd = st.fd, None
            frame.buffers = _map_slot(fd, st.lens)
            self._state = None
            return frame
        while len(frame.buffers) < st.nbufs or (frame.buffers and st.offset < st.lens[len(frame.buffers) - 1]):
            if not frame.buffers or st.offset >= st.lens[len(frame.buffers) - 1]:
                frame.buffers.append(_alloc(st.lens[len(frame.buffers)]))
                st.offset = 0
            buf = frame.buffers[-1]
            need = st.lens[len(frame.buffers) - 1]
            if self._rbuf:  # bytes already read past the payload
                k = min(len(self._rbuf), need - st.offset)
                buf[st.offset : st.offset + k] = self._rbuf[:k]
                del self._rbuf[:k]
                st.offset += k
            view = memoryview(buf)
            while st.offset < need:
                self._set_timeout(deadline)
                try:
                    got = self.sock.recv_into(view[st.offset :], need - st.offset)
                except socket.timeout:
                    raise Timeout() from None
                except OSError as e:
                    raise Closed(str(e)) from None
                if not got:
                    raise Closed("the peer closed the connection")
                st.offset += got
        self._state = None
        return frame


def _alloc(n):
    """A writable buffer of n bytes for an out-of-band value; large ones are
    left uninitialised (numpy.empty: no zero-filling pass before the read)."""
    if n >= _SMALL:
        np = sys.modules.get("numpy")
        if np is None:
            try:
                import numpy as np
            except ImportError:
                np = None
        if np is not None:
            return np.empty(n, dtype=np.uint8)
    return bytearray(n)


class _Partial:
    """A frame read in part: what is known of it so far."""

    __slots__ = ("frame", "nbufs", "plen", "lens", "offset", "fd")

    def __init__(self, frame, nbufs, plen):
        self.frame, self.nbufs, self.plen = frame, nbufs, plen
        self.lens = None
        self.offset = 0
        self.fd = None  # an F_SHM frame's slot, until it is mapped
