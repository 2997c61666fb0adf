# SPDX-License-Identifier: Apache-2.0
"""A compiled graph's standing plan inside one actor worker.

The driver sets a plan up with three ordinary actor calls of
``__ray_call__`` (as Ray does), each a function of this module:

* ``prepare(instance, graph_id, secret)``: open this graph's listeners (a unix
  socket in the abstract namespace and TCP on the node IP) and a thread that
  accepts authenticated connections on them; returns this worker's node id
  and addresses.
* ``start(instance, plan)``: build the registered communicator if the plan
  has one, connect to the downstream peers, start the graph's thread; returns
  once the outgoing connections are up.
* ``stop(instance, graph_id)``: close the graph's sockets, join its thread,
  destroy its communicator. Idempotent; the actor lives on.

The graph's thread runs the plan step after step: read one input frame from
the driver (when a task of this actor reads the input), run this actor's
tasks in bind order, each reading its upstream values from the peers' sockets
(or locally, for a task of the same actor), and send each output to the
workers that consume it and, for a graph output, to the driver. A task whose
argument is an error skips and forwards it. Ordinary method calls go on
running on the worker's main thread meanwhile.

When a peer's connection ends (it died), the plan stops executing and waits
for the driver's connection to end (the driver notices the dead actor on its
own and tears the graph down), so only a dead process's sockets close by
themselves.
"""

import os
import sys
import threading
import traceback
import types

import ray
from ray._private import tensors as _tensors
from ray._private import worker as _worker
from ray.dag import _transport as T
from ray.dag._transport import Err
from ray.exceptions import RayTaskError

_graphs = {}  # graph id -> _Plan, in this worker
_lock = threading.Lock()

_ACCEPT_TIMEOUT_S = 60.0
_CoroutineType = types.CoroutineType


def _runtime():
    return _worker.runtime()


def prepare(instance, graph_id, secret):
    rt = _runtime()
    plan = _Plan(graph_id, secret, instance)
    sockets, address = T.listen(graph_id, rt.node_ip)
    plan.listeners = sockets
    with _lock:
        old = _graphs.pop(graph_id, None)
        _graphs[graph_id] = plan
    if old is not None:
        old.stop()
    plan.acceptor = threading.Thread(target=plan.accept_loop, name="cgraph-accept", daemon=True)
    plan.acceptor.start()
    return {"node_id": rt.node_id, "address": address, "pid": os.getpid()}


def start(instance, spec):
    with _lock:
        plan = _graphs.get(spec["graph_id"])
    if plan is None:
        raise RuntimeError("the compiled graph was not prepared on this actor (or was torn down)")
    plan.configure(spec)
    plan.thread = threading.Thread(target=plan.run, name="cgraph-exec", daemon=True)
    plan.thread.start()
    return True


def stop(instance, graph_id):
    with _lock:
        plan = _graphs.pop(graph_id, None)
    if plan is not None:
        plan.stop()
    return True


def running(instance, graph_id):
    """For tests: whether this worker holds the graph and its thread lives."""
    with _lock:
        plan = _graphs.get(graph_id)
    return plan is not None and plan.thread is not None and plan.thread.is_alive()


def _task_error(method, exc, class_name):
    tb_top = exc.__traceback__
    while tb_top is not None and tb_top.tb_frame.f_code.co_filename == __file__:
        tb_top = tb_top.tb_next  # the remote traceback starts at the user's code
    tb = "".join(traceback.format_exception(type(exc), exc, tb_top))
    rt = _runtime()
    actor_id = rt.actor_id.hex() if rt.actor_id is not None else None
    err = RayTaskError(
        method,
        tb,
        exc,
        proctitle=f"ray::{class_name}.{method}",
        pid=os.getpid(),
        actor_repr=class_name,
        actor_id=actor_id,
    )
    return err


class _Task:
    __slots__ = ("key", "method", "fn", "args", "kwargs", "peers", "comm_peers", "to_driver", "keep", "simple")

    def __init__(self, spec, instance):
        self.key = spec["key"]
        self.method = spec["method"]
        self.fn = getattr(instance, self.method)
        self.args = spec["args"]
        self.kwargs = spec["kwargs"]
        self.peers = spec["peers"]  # actor indexes that read this task's output
        self.comm_peers = set(spec.get("comm_peers") or ())  # those reached through the communicator
        self.to_driver = spec["to_driver"]
        self.keep = spec["keep"]  # a later task of this actor reads it
        # the common vLLM shape: one argument, straight from the input or one upstream task
        self.simple = len(self.args) == 1 and not self.kwargs


class _Plan:
    def __init__(self, graph_id, secret, instance):
        self.graph_id = graph_id
        self.secret = secret
        self.instance = instance
        self.class_name = type(instance).__name__
        self.listeners = []
        self.acceptor = None
        self.thread = None
        self.incoming = {}  # src index -> Conn
        self.outgoing = {}  # peer index -> Conn
        self.cond = threading.Condition()
        self.stopping = False
        self.comm = None
        self.peer_ranks = {}
        self.pending = {}  # (src, key) -> [frames] read ahead of their turn
        self.aio_loop = None  # for async def methods, made on first use

    # -- set-up ---------------------------------------------------------------

    def accept_loop(self):
        """Until the listeners close (all expected peers came) or the plan
        stops: take each peer whose proof checks out (T.Acceptor: proofs
        read at once, an idle or foreign peer dropped without delaying
        others)."""
        acceptor = T.Acceptor(self.listeners, self.secret)
        try:
            while not self.stopping:
                for src, conn in acceptor.poll(0.5):
                    with self.cond:
                        if src in self.incoming or self.stopping:
                            conn.close()
                            continue
                        self.incoming[src] = conn
                        self.cond.notify_all()
        except (T.Closed, OSError, ValueError):
            pass
        finally:
            acceptor.close()

    def configure(self, spec):
        self.index = spec["index"]
        self.driver = spec["driver"]
        self.needs_input = spec["needs_input"]
        self.expect = set(spec["expect"])
        self.tasks = [_Task(t, self.instance) for t in spec["tasks"]]
        comm = spec.get("comm")
        if comm is not None:
            self.comm = comm["cls"](comm["world_size"], comm["comm_id"], comm["rank"], comm["handles"], None)
            if hasattr(self.comm, "initialize"):
                self.comm.initialize(comm["rank"])
            for peer, handle in comm["peer_handles"].items():
                self.peer_ranks[peer] = self.comm.get_rank(handle)
        self.shm_slots = spec.get("shm_slots", T.SHM_SLOTS)
        for peer, (address, same_node) in spec["connect"].items():
            self.outgoing[peer] = conn = T.connect(address, same_node, self.secret, self.index)
            conn.enable_shm(self.shm_slots)  # on one node only (a unix socket)

    def _await_incoming(self):
        with self.cond:
            ok = self.cond.wait_for(
                lambda: self.stopping or self.expect <= set(self.incoming), timeout=_ACCEPT_TIMEOUT_S
            )
        for ls in self.listeners:
            try:
                ls.close()
            except OSError:
                pass
        if not ok or self.stopping:
            raise T.Closed("the compiled graph's connections did not all arrive")

    # -- the loop ---------------------------------------------------------------

    def run(self):
        try:
            self._await_incoming()
            _set_cuda_device()
            self._loop()
        except T.Closed:
            pass
        except Exception:  # a bug here: say so in the actor's log, close up
            traceback.print_exc(file=sys.stderr)
        finally:
            if self.aio_loop is not None:
                self.aio_loop.close()
            self._close_all()

    def _read_from(self, src, key):
        """The frame task ``key`` of actor ``src`` sent for this step."""
        queued = self.pending.get((src, key))
        if queued:
            return queued.pop(0)
        conn = self.incoming[src]
        while True:
            frame = conn.read()
            if frame.key == key:
                return frame
            self.pending.setdefault((src, frame.key), []).append(frame)

    def _value_from(self, src, key):
        try:
            frame = self._read_from(src, key)
        except T.Closed:
            raise _PeerGone(src) from None
        if frame.kind == T.ERROR:
            return Err(T.loads(frame.payload, frame.buffers))
        tensors = None
        payload = frame.payload
        if frame.flags & T.F_COMM:
            metas, payload = T.loads(payload, [])
            tensors = [self.comm.recv(shape, dtype, self.peer_ranks[src], _allocate) for shape, dtype in metas]
        return T.loads(payload, frame.buffers, tensors)

    def _resolve(self, spec, inp, local):
        kind = spec[0]
        if kind == "c":
            return spec[1]
        if kind == "t":
            if spec[2] == self.index:
                return local[spec[1]]
            return self._value_from(spec[2], spec[1])
        args, kwargs = inp
        if kind == "i":
            return args[0]
        key = spec[1]
        return args[key] if isinstance(key, int) else kwargs[key]

    def _loop(self):
        driver = self.incoming.get(self.driver)
        driver.enable_shm(self.shm_slots)  # on one node only (a unix socket)
        seq = 0
        inp = None
        local = {}
        while True:
            if self.needs_input:
                frame = driver.read()
                inp = T.loads(frame.payload, frame.buffers)
            for task in self.tasks:
                try:
                    if task.simple:
                        args = (self._resolve(task.args[0], inp, local),)
                        kwargs = {}
                    else:
                        args = tuple(self._resolve(a, inp, local) for a in task.args)
                        kwargs = {k: self._resolve(v, inp, local) for k, v in task.kwargs.items()}
                except _PeerGone:
                    return self._broken()
                err = next((a for a in args if type(a) is Err), None)
                if err is None:
                    err = next((v for v in kwargs.values() if type(v) is Err), None)
                if err is None:
                    try:
                        out = task.fn(*args, **kwargs)
                        if type(out) is _CoroutineType:  # an async def method: run it on this thread's loop
                            out = self._run_coroutine(out)
                    except Exception as e:
                        out = Err(_task_error(task.method, e, self.class_name))
                else:
                    out = err
                try:
                    out = self._send(task, seq, out)
                except _PeerGone:
                    return self._broken()
                if task.keep:
                    local[task.key] = out
            local.clear()
            seq += 1

    def _run_coroutine(self, coro):
        import asyncio

        if self.aio_loop is None:
            self.aio_loop = asyncio.new_event_loop()
        return self.aio_loop.run_until_complete(coro)

    def _send(self, task, seq, out):
        plain = comm_frame = None
        stage = _tensors.host_stage()
        stage.reset()  # what it staged for the last send was sent
        if type(out) is Err:
            plain = self._dump_error(task, out.exc)
        else:
            try:
                if task.to_driver or len(task.comm_peers) < len(task.peers):
                    plain = (T.VALUE, *T.dumps(out, stage=stage))
                comm_frame = None
                if task.comm_peers:
                    tensors = []
                    inner, bufs = T.dumps(out, tensors)
                    metas = [(tuple(t.shape), t.dtype) for t in tensors]
                    comm_frame = (T.dumps((metas, inner))[0], bufs, tensors)
            except Exception as e:
                out = Err(
                    _task_error(
                        task.method,
                        TypeError(f"the output of {self.class_name}.{task.method}() could not be serialized: {e}"),
                        self.class_name,
                    )
                )
                plain = self._dump_error(task, out.exc)
                comm_frame = None
        for peer in task.peers:
            conn = self.outgoing[peer]
            try:
                if comm_frame is not None and peer in task.comm_peers:
                    payload, bufs, tensors = comm_frame
                    conn.send(T.VALUE, task.key, seq, payload, bufs, flags=T.F_COMM)
                    for t in tensors:
                        self.comm.send(t, self.peer_ranks[peer])
                else:
                    conn.send(plain[0], task.key, seq, plain[1], plain[2])
            except T.Closed:
                raise _PeerGone(peer) from None
        if task.to_driver:
            self.incoming[self.driver].send(plain[0], task.key, seq, plain[1], plain[2])
        return out

    def _dump_error(self, task, exc):
        try:
            return (T.ERROR, *T.dumps(exc))
        except Exception as e:
            return (
                T.ERROR,
                *T.dumps(
                    _task_error(
                        task.method,
                        TypeError(f"the error raised by {self.class_name}.{task.method}() could not be pickled: {e}"),
                        self.class_name,
                    )
                ),
            )

    def _broken(self):
        """A peer is gone: execute nothing more; hold the driver's connection
        until the driver ends it (it notices the dead actor itself)."""
        driver = self.incoming.get(self.driver)
        for conn in list(self.outgoing.values()) + [c for s, c in self.incoming.items() if s != self.driver]:
            conn.shutdown()
        try:
            while driver is not None:
                driver.read()
        except T.Closed:
            pass

    # -- the end ------------------------------------------------------------------

    def _close_all(self):
        with self.cond:
            conns = list(self.incoming.values()) + list(self.outgoing.values())
        for conn in conns:
            conn.close()
        for ls in self.listeners:
            try:
                ls.close()
            except OSError:
                pass

    def stop(self):
        with self.cond:
            self.stopping = True
            conns = list(self.incoming.values()) + list(self.outgoing.values())
            self.cond.notify_all()
        for conn in conns:
            conn.shutdown()  # wakes the graph's thread wherever it blocks in a socket
        for ls in self.listeners:
            try:
                ls.shutdown(2)
            except OSError:
                pass
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=10)
        if self.acceptor is not None:
            self.acceptor.join(timeout=2)
        self._close_all()
        if self.comm is not None:
            try:
                self.comm.destroy()
            except Exception:
                pass


class _PeerGone(Exception):
    def __init__(self, peer):
        super().__init__(peer)
        self.peer = peer


def _set_cuda_device():
    """Make the actor's GPU the graph thread's current CUDA device, as Ray's
    channel device context does (a new thread starts on device 0): the
    GPU's position in CUDA_VISIBLE_DEVICES, or its id. Only where torch is
    already imported and CUDA is available; never fatal."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        if not gpu_ids or not torch.cuda.is_available():
            return
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        index = visible.index(gpu_ids[0]) if visible else int(gpu_ids[0])
        torch.cuda.set_device(index)
    except Exception as e:
        print(f"beam: compiled graph: could not set the CUDA device of the graph's thread: {e}", file=sys.stderr)


def _allocate(shape, dtype):
    """The TorchTensorAllocator handed to ``Communicator.recv``: on the
    thread's current CUDA device when there is one, else in host memory."""
    import torch

    if torch.cuda.is_available():
        return torch.empty(shape, dtype=dtype, device="cuda")
    return torch.empty(shape, dtype=dtype)
