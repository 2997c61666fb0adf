# SPDX-License-Identifier: Apache-2.0
"""CompiledDAG: the driver's side of a compiled graph.

Compiling orders the graph's actor-method nodes (bind order is a
topological order), gives each actor its tasks, and sets up a standing plan
in each actor (``ray.dag._runtime``, through ordinary ``__ray_call__`` calls):
a socket from each producing actor to each consuming actor, and one from the
driver to every actor. ``execute`` writes one input frame to each actor that
reads the input and returns CompiledDAGRefs; ``get`` reads the outputs of the
executions up to its own straight from the last stage's sockets, in
execution order, buffering them for the other refs. Nothing of a step goes
through beamd.

A monitor thread polls the driver's sockets for hang-ups only (it reads
nothing): a worker's death ends its socket, and the monitor marks the graph
broken and shuts the other sockets, so pending gets raise ActorDiedError and
later executes RayChannelError, without anyone reading.
"""

import os
import select
import threading
import time
import uuid
import weakref

import ray
from ray import exceptions as _exc
from ray._private import tensors
from ray.dag import _runtime
from ray.dag import _transport as T
from ray.dag import dag_node as _nodes
from ray.dag._transport import Err
from ray.dag.context import DAGContext
from ray.dag.dag_node import ClassMethodNode, DAGNode, InputAttributeNode, InputNode, MultiOutputNode, unsupported
from ray.experimental.channel import accelerator_context
from ray.experimental.compiled_dag_ref import CompiledDAGRef

_SETUP_TIMEOUT_S = 120


class _TaskInfo:
    def __init__(self, node, key, actor):
        self.node = node
        self.key = key
        self.actor = actor  # actor index
        self.peers = []
        self.comm_peers = []
        self.to_driver = False
        self.keep = False


class CompiledDAG:
    """What ``experimental_compile()`` returns: ``execute`` runs one step."""

    def __init__(
        self,
        root,
        submit_timeout=None,
        enable_asyncio=False,
        max_inflight_executions=None,
        max_buffered_results=None,
        overlap_gpu_communication=None,
    ):
        if enable_asyncio:
            unsupported("experimental_compile(enable_asyncio=True) (asyncio graphs)")
        if not ray.is_initialized():
            ray.init()
        ctx = DAGContext.get_current()
        self._get_timeout = ctx.get_timeout
        self._submit_timeout = submit_timeout if submit_timeout is not None else ctx.submit_timeout
        self._teardown_timeout = ctx.teardown_timeout
        self._max_inflight_executions = (
            max_inflight_executions if max_inflight_executions is not None else ctx.max_inflight_executions
        )
        self._max_buffered_results = (
            max_buffered_results if max_buffered_results is not None else ctx.max_buffered_results
        )
        self._overlap_gpu_communication = bool(overlap_gpu_communication)
        self._enable_asyncio = False
        self._dag_id = uuid.uuid4().hex
        self._is_teardown = False
        self._teardown_lock = threading.Lock()
        self._lock = threading.RLock()
        self._error = None  # set once the graph is broken
        self._conns = {}  # actor index -> Conn
        self._monitor = None
        self._wake_r = self._wake_w = None
        self._execution_index = -1
        self._max_finished_execution_index = -1
        self._result_buffer = {}  # execution index -> {channel index: value}
        self._destructed_ref_idxs = {}  # execution index -> {channel indexes}
        self._timed_out_ref_idxs = {}  # the same, for refs whose get timed out
        self._partial = {}  # task key -> value, for the execution being read
        self.actor_refs = []
        self._build(root)
        try:
            self._setup()
        except BaseException:
            self.teardown()
            raise

    # -- building the plan -----------------------------------------------------

    def _build(self, root):
        self._returns_list = isinstance(root, MultiOutputNode)
        outputs = list(root.get_args()) if self._returns_list else [root]
        if not outputs:
            raise ValueError("The compiled graph has no outputs")
        for out in outputs:
            if not isinstance(out, ClassMethodNode):
                raise ValueError(f"A compiled graph's outputs must be actor method calls, got {type(out).__name__}")
        nodes, seen, stack = [], set(), list(outputs)
        input_nodes = set()
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, ClassMethodNode):
                nodes.append(node)
            elif isinstance(node, InputAttributeNode):
                input_nodes.add(id(node._dag_input_node))
            elif isinstance(node, InputNode):
                input_nodes.add(id(node))
            elif isinstance(node, MultiOutputNode):
                raise ValueError("A MultiOutputNode can only be the graph's output")
            else:
                node.experimental_compile()  # names what is not implemented
            stack.extend(node._children())
        if len(input_nodes) > 1:
            raise ValueError("A compiled graph can have only one InputNode")
        if not input_nodes:  # as in Ray
            raise NotImplementedError("Compiled DAGs currently require exactly one InputNode")
        nodes.sort(key=lambda n: n._bind_index)
        actors, actor_index = [], {}
        for node in nodes:
            aid = node._actor_handle._ray_actor_id_bytes
            if aid not in actor_index:
                actor_index[aid] = len(actors)
                actors.append(node._actor_handle)
        self.actor_refs = actors
        self._driver_index = len(actors)
        tasks = [_TaskInfo(n, k, actor_index[n._actor_handle._ray_actor_id_bytes]) for k, n in enumerate(nodes)]
        by_node = {id(t.node): t for t in tasks}
        self._tasks = tasks
        positional, keywords, direct = 0, set(), False
        edges = set()
        needs_input = set()
        comm_actors = set()
        comm_cls = _registered_communicator()

        def spec(value, task):
            nonlocal positional, direct
            if isinstance(value, ClassMethodNode):
                src = by_node[id(value)]
                if src.actor == task.actor:
                    src.keep = True
                else:
                    if task.actor not in src.peers:
                        src.peers.append(task.actor)
                    edges.add((src.actor, task.actor))
                    if (
                        value._tensor_transport is not None
                        and comm_cls is not None
                        and task.actor not in src.comm_peers
                    ):
                        src.comm_peers.append(task.actor)
                        comm_actors.update((src.actor, task.actor))
                return ("t", src.key, src.actor)
            if isinstance(value, InputAttributeNode):
                needs_input.add(task.actor)
                if isinstance(value.key, int):
                    positional = max(positional, value.key + 1)
                else:
                    keywords.add(value.key)
                return ("a", value.key)
            if isinstance(value, InputNode):
                needs_input.add(task.actor)
                direct = True
                return ("i",)
            if isinstance(value, DAGNode):
                raise ValueError(f"{type(value).__name__} cannot be an argument in a compiled graph")
            return ("c", value)

        for t in tasks:
            if not any(isinstance(a, DAGNode) for a in t.node.get_args()):  # as in Ray
                raise ValueError(
                    "Compiled DAGs require each task to take a ray.dag.InputNode or at least one other "
                    f"DAGNode as an input. Invalid task node: {t.node!r}"
                )
            t.args = [spec(a, t) for a in t.node.get_args()]
            for v in t.node.get_kwargs().values():
                if isinstance(v, DAGNode):  # as in Ray
                    raise ValueError("Compiled DAG currently does not support binding to other DAG nodes as kwargs")
            t.kwargs = {k: spec(v, t) for k, v in t.node.get_kwargs().items()}
        if direct and (positional or keywords):
            raise ValueError("A compiled graph cannot use the InputNode both whole and by attribute")
        self._input_positional = 1 if direct else positional
        self._input_kwargs = sorted(keywords)
        self._needs_input = needs_input
        self._edges = edges
        self._comm_cls = comm_cls if comm_actors else None
        self._comm_actors = sorted(comm_actors)
        # outputs: channel index -> task key; per actor, the keys it sends the driver, in order
        self._output_keys = []
        for out in outputs:
            t = by_node[id(out)]
            t.to_driver = True
            self._output_keys.append(t.key)
        self._read_order = []  # [(actor index, [task keys])]
        per_actor = {}
        for t in tasks:
            if t.to_driver:
                per_actor.setdefault(t.actor, []).append(t.key)
        self._read_order = sorted(per_actor.items())
        self.dag_output_channels = list(range(len(outputs)))

    def _setup(self):
        secret = os.urandom(32)
        rt = ray._private.worker.runtime()
        infos = ray.get(
            [a.__ray_call__.remote(_runtime.prepare, self._dag_id, secret) for a in self.actor_refs],
            timeout=_SETUP_TIMEOUT_S,
        )
        self._worker_pids = [i["pid"] for i in infos]
        comm = None
        if self._comm_cls is not None:
            comm = {
                "cls": self._comm_cls,
                "world_size": len(self._comm_actors),
                "comm_id": self._comm_cls.generate_communicator_id()
                if hasattr(self._comm_cls, "generate_communicator_id")
                else uuid.uuid4(),
                "handles": [self.actor_refs[i] for i in self._comm_actors],
            }
        specs = []
        for i, actor in enumerate(self.actor_refs):
            mine = [t for t in self._tasks if t.actor == i]
            spec = {
                "graph_id": self._dag_id,
                "index": i,
                "driver": self._driver_index,
                "needs_input": i in self._needs_input,
                "shm_slots": self._shm_slots(),
                "expect": sorted({a for a, b in self._edges if b == i} | {self._driver_index}),
                "connect": {
                    b: (infos[b]["address"], infos[b]["node_id"] == infos[i]["node_id"])
                    for a, b in sorted(self._edges)
                    if a == i
                },
                "tasks": [
                    {
                        "key": t.key,
                        "method": t.node._method_name,
                        "args": t.args,
                        "kwargs": t.kwargs,
                        "peers": t.peers,
                        "comm_peers": t.comm_peers,
                        "to_driver": t.to_driver,
                        "keep": t.keep,
                    }
                    for t in mine
                ],
            }
            if comm is not None and i in self._comm_actors:
                peers = {a for a, b in self._edges if b == i} | {b for a, b in self._edges if a == i}
                spec["comm"] = dict(
                    comm,
                    rank=self._comm_actors.index(i),
                    peer_handles={p: self.actor_refs[p] for p in peers if p in self._comm_actors},
                )
            specs.append(spec)
        ray.get(
            [a.__ray_call__.remote(_runtime.start, s) for a, s in zip(self.actor_refs, specs)], timeout=_SETUP_TIMEOUT_S
        )
        for i in range(len(self.actor_refs)):
            self._conns[i] = T.connect(
                infos[i]["address"], infos[i]["node_id"] == rt.node_id, secret, self._driver_index
            )
            self._conns[i].enable_shm(self._shm_slots())  # on one node only (a unix socket)
        self._fd_actor = {c.fd: i for i, c in self._conns.items()}
        self._wake_r, self._wake_w = os.pipe()
        self._monitor = threading.Thread(
            target=_monitor,
            args=(weakref.ref(self), list(self._fd_actor), self._wake_r),
            name="CompiledGraphMonitorThread",
            daemon=True,
        )
        self._monitor.start()

    def _shm_slots(self):
        """Shared-memory slots a writer keeps per connection: one per
        execution the capacity rule lets be in flight, and one more for the
        one being written."""
        return min(self._max_inflight_executions, 32) + 1

    # -- running --------------------------------------------------------------

    def get_id(self):
        return self._dag_id

    @property
    def is_teardown(self):
        return self._is_teardown

    def _check_usable(self):
        if self._is_teardown:
            raise _exc.RayChannelError("The compiled graph has been torn down; compile a new one.")
        if self._error is not None:
            raise _exc.RayChannelError(f"The compiled graph is broken and cannot execute: {self._error}")

    def _check_inputs(self, args, kwargs):
        if len(args) != self._input_positional:
            raise ValueError(
                f"dag.execute() or dag.execute_async() must be called with {self._input_positional} "
                f"positional args, got {len(args)}"
            )
        for kw in self._input_kwargs:
            if kw not in kwargs:
                raise ValueError(f"dag.execute() or dag.execute_async() must be called with kwarg `{kw}`")

    def execute(self, *args, **kwargs):
        """Run one step: one input frame to each actor that reads the input.
        Returns a list of CompiledDAGRef (a MultiOutputNode) or one."""
        self._check_usable()
        self._check_inputs(args, kwargs)
        stage = tensors.host_stage()
        stage.reset()  # this thread's last input was sent
        payload, buffers = T.dumps((args, kwargs), stage=stage)
        with self._lock:
            self._check_usable()
            self._try_release_buffers()
            inflight = self._execution_index - self._max_finished_execution_index
            if inflight >= self._max_inflight_executions:
                raise _exc.RayCgraphCapacityExceeded(
                    f"The compiled graph can't have more than {self._max_inflight_executions} in-flight "
                    f"executions, and you currently have {inflight} in-flight executions. Retrieve an output "
                    "using ray.get before submitting more requests or increase `_max_inflight_executions`. "
                    "`dag.experimental_compile(_max_inflight_executions=...)`"
                )
            seq = self._execution_index + 1
            for i in self._needs_input:
                try:
                    self._conns[i].send(T.VALUE, 0, seq, payload, buffers)
                except T.Closed:
                    self._broken(i)
                    self._check_usable()
            self._execution_index = seq
        if self._returns_list:
            return [CompiledDAGRef(self, seq, ch) for ch in self.dag_output_channels]
        return CompiledDAGRef(self, seq)

    def _next_execution_can_be_released(self):
        nxt = self._max_finished_execution_index + 1
        return nxt <= self._execution_index and len(self._destructed_ref_idxs.get(nxt, ())) == len(
            self.dag_output_channels
        )

    def _try_release_buffers(self):
        while self._next_execution_can_be_released():
            self._execute_until(self._max_finished_execution_index + 1, None, self._get_timeout)

    def _execute_until(self, execution_index, channel_index=None, timeout=None):
        """Read the outputs of every execution up to ``execution_index``,
        buffering them. ``timeout``: None means RAY_CGRAPH_get_timeout, -1
        forever."""
        if timeout is None:
            timeout = self._get_timeout
        deadline = None if timeout == -1 else time.monotonic() + max(0.0, float(timeout))
        if not self._lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic())):
            raise _exc.RayChannelTimeoutError(self._timeout_message())
        try:
            while self._max_finished_execution_index < execution_index:
                if self._is_teardown:
                    raise _exc.RayChannelError("The compiled graph has been torn down.")
                if self._error is not None:
                    raise self._error
                if len(self._result_buffer) >= self._max_buffered_results:
                    raise _exc.RayCgraphCapacityExceeded(
                        f"The compiled graph can't have more than {self._max_buffered_results} buffered results, "
                        f"and you currently have {len(self._result_buffer)} buffered results. Call `ray.get()` "
                        "on CompiledDAGRef's to retrieve results, or increase `_max_buffered_results`."
                    )
                self._read_one(deadline)
        finally:
            self._lock.release()

    def _timeout_message(self):
        return (
            "If the execution is expected to take a long time, increase RAY_CGRAPH_get_timeout which is "
            f"currently {self._get_timeout} seconds. Otherwise, this may indicate that the execution is "
            "hanging."
        )

    def _read_one(self, deadline):
        """Read the next execution's outputs from every output actor."""
        seq = self._max_finished_execution_index + 1
        partial = self._partial
        for actor, keys in self._read_order:
            conn = self._conns[actor]
            for key in keys:
                if key in partial:
                    continue
                try:
                    frame = conn.read(deadline)
                except T.Timeout:
                    raise _exc.RayChannelTimeoutError(self._timeout_message()) from None
                except T.Closed:
                    if self._is_teardown:
                        raise _exc.RayChannelError("The compiled graph has been torn down.") from None
                    self._broken(actor)
                    raise self._error from None
                if frame.kind == T.ERROR:
                    partial[frame.key] = Err(T.loads(frame.payload, frame.buffers))
                else:
                    partial[frame.key] = T.loads(frame.payload, frame.buffers)
        self._partial = {}
        results = {ch: partial[key] for ch, key in enumerate(self._output_keys)}
        err = next((v for v in results.values() if type(v) is Err), None)
        if err is not None:  # as in Ray: one output's error stands for every output of the execution
            results = dict.fromkeys(results, err)
        for ch in self._destructed_ref_idxs.pop(seq, set()) | self._timed_out_ref_idxs.pop(seq, set()):
            results.pop(ch, None)
        if results:
            self._result_buffer[seq] = results
        self._max_finished_execution_index = seq

    def _get_execution_results(self, execution_index, channel_index):
        with self._lock:
            results = self._result_buffer[execution_index]
            if channel_index is None:
                values = [results.pop(ch) for ch in sorted(results)]
            else:
                values = [results.pop(channel_index)]
            if not results:
                del self._result_buffer[execution_index]
        return values

    def _release_ref(self, execution_index, channel_index, timed_out=False):
        """A ref that will never be read: deleted unread, or its get timed out
        (then its value is dropped when it arrives, but, as in Ray, execute
        does not wait for it to arrive)."""
        ch = 0 if channel_index is None else channel_index
        results = self._result_buffer.get(execution_index)
        if results is not None:
            results.pop(ch, None)
            if not results:
                self._result_buffer.pop(execution_index, None)
        elif execution_index > self._max_finished_execution_index:
            table = self._timed_out_ref_idxs if timed_out else self._destructed_ref_idxs
            table.setdefault(execution_index, set()).add(ch)

    # -- failures and the end -----------------------------------------------------

    def _broken(self, actor):
        """Actor ``actor``'s connection ended: the graph is broken. Shut every
        socket so that blocked reads wake and the live workers stop."""
        if self._is_teardown or self._error is not None:
            return
        handle = self.actor_refs[actor]
        aid = handle._ray_actor_id_bytes.hex()
        self._error = _exc.ActorDiedError(
            error_msg=f"The actor {aid} ({handle._ray_class_name}) died while running a compiled graph; the "
            "graph's pending and later executions cannot finish. Tear the graph down.",
            actor_id=aid,
        )
        for conn in list(self._conns.values()):
            conn.shutdown()

    def teardown(self, kill_actors=False):
        """Stop the graph in every actor (the actors stay alive and keep
        answering ordinary calls). Idempotent."""
        with self._teardown_lock:
            if self._is_teardown:
                return
            self._is_teardown = True
        if self._wake_w is not None:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass
        for conn in list(self._conns.values()):
            conn.shutdown()
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=5)
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._result_buffer.clear()
        for fd in (self._wake_r, self._wake_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = None
        if not ray.is_initialized():
            return
        refs = []
        for actor in self.actor_refs:
            try:
                refs.append(actor.__ray_call__.remote(_runtime.stop, self._dag_id))
            except Exception:
                pass
        for ref in refs:
            try:
                ray.get(ref, timeout=self._teardown_timeout)
            except Exception:
                pass  # a dead actor has nothing left to stop
        if kill_actors:
            for actor in self.actor_refs:
                try:
                    ray.kill(actor)
                except Exception:
                    pass

    def __del__(self):
        try:
            self.teardown()
        except Exception:
            pass

    def visualize(self, *args, **kwargs):
        unsupported("CompiledDAG.visualize()")

    def execute_async(self, *args, **kwargs):
        raise ValueError("Use execute if enable_asyncio=False")


def _monitor(dag_ref, fds, wake_fd):
    """Notice a worker's death without reading: POLLRDHUP/POLLHUP on the
    driver's sockets; the wake pipe ends the thread."""
    poller = select.poll()
    mask = select.POLLRDHUP | select.POLLHUP | select.POLLERR
    for fd in fds:
        poller.register(fd, mask)
    poller.register(wake_fd, select.POLLIN)
    while True:
        try:
            events = poller.poll()
        except OSError:
            return
        for fd, _ in events:
            if fd == wake_fd:
                return
            poller.unregister(fd)
            dag = dag_ref()
            if dag is None or dag._is_teardown:
                return
            dag._broken(dag._fd_actor[fd])
            del dag


def _registered_communicator():
    return accelerator_context._registered_communicator()


def build_compiled_dag_from_ray_dag(
    dag,
    submit_timeout=None,
    buffer_size_bytes=None,
    enable_asyncio=False,
    max_inflight_executions=None,
    max_buffered_results=None,
    overlap_gpu_communication=None,
    default_communicator="create",
):
    return dag.experimental_compile(
        _submit_timeout=submit_timeout,
        enable_asyncio=enable_asyncio,
        _max_inflight_executions=max_inflight_executions,
        _max_buffered_results=max_buffered_results,
        _overlap_gpu_communication=overlap_gpu_communication,
    )


_nodes.set_compiler(CompiledDAG)
