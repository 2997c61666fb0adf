# SPDX-License-Identifier: Apache-2.0
"""The process's runtime: its one connection to beamd, ray.init/shutdown,
and get/wait/put/kill.

A driver gets its runtime from ``ray.init()``; a worker from ``ray._worker``
before any user code runs. Everything here is safe to call from several
threads at once: _beam serialises sends and files replies by message id.

``ray._private.node`` and ``worker_logs`` are imported where they are used,
not at the top: ``import ray`` would pay for them (a few ms) in every
process, and a worker needs neither. So is ``_beam``: ``import ray`` works
without the extension (scripts/scan_vllm_ray.py imports beam's ``ray`` from
python/ alone); only talking to a daemon needs it.
"""

import atexit
import math
import os
import pickle as _pickle
import sys
import threading
import time
import uuid

from ray import exceptions as _exc
from ray._private import auto_init_hook as _auto_init_hook
from ray._private import direct as _direct
from ray._private import ids as _ids
from ray._private import refcount as _refcount
from ray._private import serialization as _ser
from ray._private import services as _services
from ray._private import shm as _shm
from ray._private import utils as _utils
from ray._private.object_ref import ObjectRef

STATUS_OK, STATUS_TASK_ERROR, STATUS_ACTOR_DIED, STATUS_LOST, STATUS_UNSCHEDULABLE = 0, 1, 2, 3, 4
STATUS_ACTOR_INIT_FAILED = 5  # the actor's constructor raised (docs/PROTOCOL.md, "Object results")
STATUS_ACTOR_UNAVAILABLE = 6  # sent to a worker that died while the actor restarts: "<actor hex> <text>"
STATUS_WORKER_CRASHED = 7  # a task's worker died and its retries are spent
STATUS_OWNER_DIED = 8  # the driver or actor that made the ref ended before its value came

_runtime = None
_init_lock = threading.RLock()

_INIT_KWARGS = {
    "resources",
    "labels",
    "object_store_memory",
    "local_mode",
    "include_dashboard",
    "dashboard_host",
    "dashboard_port",
    "job_config",
    "configure_logging",
    "logging_level",
    "logging_format",
    "logging_config",
    "log_to_driver",
    "namespace",
    "storage",
    "enable_resource_isolation",
    "system_reserved_cpu",
    "system_reserved_memory",
    "cgroup_path",
}


class Runtime:
    """One connection to beamd and what hello told us about it."""

    def __init__(self, client, hello, mode, private=None, runtime_env=None, namespace=None):
        self.client = client
        self.mode = mode  # "driver" or "worker"
        self.private = private
        self.node_id = hello["node_id"]
        self.node_index = hello["node_index"]
        self.conn = hello["conn"]
        self.job = hello["job"]
        self.node_ip = hello["node_ip"]
        self.socket = hello["socket"]
        self.ids = _ids.IdMaker(self.node_index, self.conn, self.job)
        self.runtime_env = runtime_env or {}
        self.namespace = namespace
        self.actor_id = None  # set in a worker
        self.actor_handle = None
        self.gpu_ids = []
        self.placement_group_id = None
        self.capture_child_tasks = False
        self.is_task = False  # a remote function's worker (ray._worker sets it)
        self.log_printer = None  # a driver's worker_logs.Printer
        self.saved_socket_env = None
        self.epoch = _refcount.attach(client)
        self.daemon_pid = hello.get("pid")
        self.shm = _shm.turn_on(client, hello)  # large values through shared memory (shm.py)

    @property
    def job_id_bytes(self):
        return self.job.to_bytes(4, "little")  # as Ray's JobID: job 1 is 01000000


def _connect(path, role, extra=None, logs=True):
    # here, not at the top: `import ray` works without the extension (see the docstring)
    import _beam

    try:
        client = _beam.Client(path)
    except OSError as e:
        raise ConnectionError(f"beam: could not connect to beamd at {path}: {e.strerror or e}") from None
    params = {"role": role, "pid": os.getpid(), "logs": bool(logs)}
    params.update(extra or {})
    try:
        hello = client.request("hello", params)
    except Exception as e:
        client.close()
        raise ConnectionError(f"beam: beamd at {path} refused hello: {e}") from None
    return client, hello


def is_initialized():
    return _runtime is not None


def auto_init_ray():
    """ray.init() with defaults if auto-connect is on and none ran yet
    (Ray's ray._private.auto_init_hook.auto_init_ray)."""
    if _auto_init_hook.enable_auto_connect and not is_initialized():
        init()


def runtime():
    """The runtime, initialising a driver's with defaults as Ray does on first
    use (unless auto-connect is off: then Ray's RaySystemError)."""
    rt = _runtime
    if rt is None:
        with _init_lock:
            auto_init_ray()
        rt = _runtime
        if rt is None:
            raise _exc.RaySystemError("Ray has not been started yet. You can start Ray with 'ray.init()'.")
    return rt


def check_initialized():
    """For the calls Ray 2.43 does not auto-init (nodes, cluster_resources,
    available_resources, timeline): Ray's RaySystemError before ray.init()."""
    if _runtime is None:
        raise _exc.RaySystemError("Ray has not been started yet. You can start Ray with 'ray.init()'.")


def _resolve_address(address, temp_dir=None):
    """Returns (socket path or None, may_start_private), as Ray finds its
    cluster: the address given, else $RAY_ADDRESS; "auto" or none means this
    node's daemon ($BEAM_SOCKET, else the one `ray start` left a session for
    in Ray's temp folder, else the per-user default socket); HOST:PORT must
    name the cluster this node's `ray start` daemon belongs to."""
    # here: ray._private.node (shutil, subprocess, tempfile) costs ~6 ms at
    # `import ray`; only finding or starting a daemon needs it (see the docstring)
    from ray._private import node as _node

    if address in (None, ""):
        address = os.environ.get("RAY_ADDRESS") or None
    if address == "local":
        return None, True
    if address is None or address == "auto":
        path = os.environ.get("BEAM_SOCKET")
        if not path:
            sess = _node.read_session(temp_dir)
            if sess:
                path = sess["socket"]
        if not path:
            import _beam

            path = _beam.default_socket_path()
        return path, address is None
    if address.startswith("unix:"):
        address = address[5:]
    if address.startswith("beam://"):
        address = address[7:]
    if "/" in address:
        return address, False
    # "HOST:PORT" (a Ray address): beam's drivers talk to their own node's
    # daemon, which must belong to that cluster
    sess = _node.read_session(temp_dir)
    if sess:
        if _node.same_cluster(address, sess):
            return sess["socket"], False
        raise ConnectionError(
            f"ray.init(address={address!r}): this node's Ray (beamd, pid {sess.get('pid')}, started by "
            f"`ray start`) belongs to the cluster at {sess['cluster']}, not to {address}. beam's drivers "
            f"connect through their own node's daemon: run the driver on a node of {address}, or "
            f"`ray stop` here and `ray start --address={address}` first."
        )
    path = os.environ.get("BEAM_SOCKET")
    if not path:
        import _beam

        path = _beam.default_socket_path()
    return path, False


def init(
    address=None,
    *,
    num_cpus=None,
    num_gpus=None,
    ignore_reinit_error=False,
    runtime_env=None,
    _node_ip_address=None,
    **kwargs,
):
    """ray.init: connect to this node's beamd, or start a private one."""
    global _runtime
    unknown = [k for k in kwargs if k not in _INIT_KWARGS and not k.startswith("_")]
    if unknown:
        raise RuntimeError(f"Unknown keyword argument(s): {', '.join(unknown)}")
    namespace = kwargs.get("namespace")
    if namespace is not None:
        _utils.validate_namespace(namespace)
    with _init_lock:
        if _runtime is not None:
            if ignore_reinit_error:
                return _context(_runtime)
            raise RuntimeError(
                "Maybe you called ray.init twice by accident? This error can be suppressed by passing "
                "in 'ignore_reinit_error=True' or by calling 'ray.shutdown()' prior to 'ray.init()'."
            )
        from ray._private import node as _node

        path, may_start = _resolve_address(address, kwargs.get("_temp_dir"))
        private = None
        logs = kwargs.get("log_to_driver", True)
        if path and _node.socket_answers(path):
            # as Ray: sizes are for a node this call starts, not one it joins
            if num_cpus is not None or num_gpus is not None:
                raise ValueError("When connecting to an existing cluster, num_cpus and num_gpus must not be provided.")
            if kwargs.get("resources") is not None:
                raise ValueError("When connecting to an existing cluster, resources must not be provided.")
        elif may_start:
            _check_default_resources(kwargs.get("resources"))
            store = kwargs.get("object_store_memory")  # the node's budget for shared-memory values
            private = _node.PrivateDaemon(
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                resources=kwargs.get("resources"),
                extra_args=["--object-store-memory", str(int(store))] if store else (),
            )
            path = private.socket
        else:
            raise ConnectionError(
                f"Could not find any running Ray instance. Please specify the one to connect to by "
                f"setting `--address` flag or `RAY_ADDRESS` environment variable. (beam looked for "
                f"beamd at {path})"
            )
        try:
            client, hello = _connect(path, "driver", logs=logs)
        except Exception:
            if private:
                private.stop()
            raise
        env = _runtime_env_dict(runtime_env)
        # as Ray: a job without a namespace gets an anonymous one of its own
        _runtime = Runtime(
            client, hello, "driver", private=private, runtime_env=env, namespace=namespace or str(uuid.uuid4())
        )
        _services.runtime_joined(_runtime.node_ip)
        if logs:
            # here: worker_logs costs ~1.5 ms at `import ray`; only a driver's log thread needs it
            from ray._private import worker_logs as _worker_logs

            _runtime.log_printer = _worker_logs.Printer(client)
        if private:
            # processes this driver starts (vLLM's engine cores) join its
            # daemon, as Ray's children find the cluster the driver started
            _runtime.saved_socket_env = os.environ.get("BEAM_SOCKET")
            os.environ["BEAM_SOCKET"] = private.socket
        return _context(_runtime)


def _check_default_resources(resources):
    """Ray's RayParams check: CPU, GPU, memory and object_store_memory are
    not custom resources (AssertionError, Ray's text)."""
    if not resources:
        return
    for name, alternative in (
        ("CPU", "num_cpus"),
        ("GPU", "num_gpus"),
        ("memory", "memory"),
        ("object_store_memory", "object_store_memory"),
    ):
        if name in resources:
            raise AssertionError(
                f"{resources} -> `{name}` cannot be a custom resource because it is one of the default "
                f"resources ({ {'CPU', 'GPU', 'memory', 'object_store_memory'} }). Use `{alternative}` instead. "
                f"For example, use `ray start --{alternative.replace('_', '-')}=1` instead of "
                f"`ray start --resources={{'{name}': 1}}`"
            )


def connect_worker(path, actor_id, token):
    """Called by ray._worker before any user code: the worker's runtime."""
    global _runtime
    client, hello = _connect(path, "worker", {"actor": actor_id, "token": token})
    _runtime = Runtime(client, hello, "worker")
    _runtime.actor_id = actor_id
    _services.runtime_joined(_runtime.node_ip)
    return _runtime


def shutdown(_exiting_interpreter=False):
    """ray.shutdown: close the connection (the daemon stops this driver's
    actors) and stop a private daemon. Twice is fine."""
    global _runtime
    with _init_lock:
        rt = _runtime
        if rt is None:
            return
        _runtime = None
        _services.runtime_joined(None)
        _refcount.detach()
        _direct.reset()
        _shm.drop_pool()  # the memfds kept to write again go with the connection
        try:
            rt.client.close()
            if rt.log_printer is not None:
                rt.log_printer.stop()  # prints what was queued
        finally:
            if rt.private:
                rt.private.stop()
                if os.environ.get("BEAM_SOCKET") == rt.private.socket:
                    if rt.saved_socket_env is None:
                        os.environ.pop("BEAM_SOCKET", None)
                    else:
                        os.environ["BEAM_SOCKET"] = rt.saved_socket_env


atexit.register(shutdown, True)


def _runtime_env_dict(runtime_env):
    if runtime_env is None:
        return {}
    if hasattr(runtime_env, "to_dict"):
        return dict(runtime_env.to_dict())
    if isinstance(runtime_env, dict):
        return dict(runtime_env)
    raise TypeError(f"runtime_env must be a dict or RuntimeEnv, got {type(runtime_env).__name__}")


class RayContext(dict):
    """What ray.init returns: Ray's address_info keys, usable as a dict or
    with attribute access, and as a context manager that shuts down."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()

    def disconnect(self):
        shutdown()


def _context(rt):
    return RayContext(
        node_ip_address=rt.node_ip,
        raylet_ip_address=rt.node_ip,
        redis_address=None,
        object_store_address=rt.socket,
        raylet_socket_name=rt.socket,
        webui_url=None,
        session_dir=os.path.dirname(rt.socket),
        metrics_export_port=None,
        gcs_address=rt.socket,
        address=rt.socket,
        dashboard_url="",
        node_id=rt.node_id.hex(),
    )


# ---------- objects ----------


def _remote_error(e):
    """Turns a _beam.RemoteError into the exception a Ray user expects."""
    code, message = (e.args + ("", ""))[:2]
    if code == "timeout":
        return _exc.GetTimeoutError(message)
    if code == "not_found":
        return ValueError(message)
    return _exc.RaySystemError(f"beamd refused the request ({code}): {message}")


def _lost_connection(e):
    """The error a lost connection to beamd raises (ConnectionError e)."""
    return _exc.RaySystemError(f"beam: lost the connection to beamd: {e}")


def _request(op, params, timeout=None):
    """The reply to op; with a timeout (seconds), TimeoutError when it has
    not come by then (beamd still does the rest: the late reply is dropped)."""
    import _beam

    rt = runtime()
    try:
        if timeout is not None:
            return rt.client.request(op, params, timeout)
        return rt.client.request(op, params)
    except _beam.RemoteError as e:
        raise _remote_error(e) from None
    except ConnectionError as e:
        raise _lost_connection(e) from None


def _value(status, data, ref):
    """Decodes one [status, data] entry; errors are returned, not raised."""
    if type(data) is dict:  # a value in shared memory: mapped, not copied
        data = _shm.read(data, runtime().daemon_pid)
        _refcount.prompt(ref._id)  # its release is sent at once (refcount.py)
    if status == STATUS_OK:
        return _ser.loads(data), None
    if status == STATUS_TASK_ERROR:
        err = _ser.loads(data)
        if isinstance(err, _exc.RayTaskError):
            return None, err.as_instanceof_cause()
        return None, err
    message = str(data, "utf-8", "replace")  # bytes, or a memoryview of a long one
    if status in (STATUS_ACTOR_DIED, STATUS_ACTOR_INIT_FAILED):
        init_failed = status == STATUS_ACTOR_INIT_FAILED
        return None, _exc.ActorDiedError(error_msg=message, actor_init_failed=init_failed)
    if status == STATUS_UNSCHEDULABLE:
        return None, _exc.ActorUnschedulableError(message)
    if status == STATUS_ACTOR_UNAVAILABLE:
        actor_hex, _, text = message.partition(" ")
        try:
            actor_id = bytes.fromhex(actor_hex)
        except ValueError:
            actor_id, text = None, message
        return None, _exc.ActorUnavailableError(text.rstrip("."), actor_id)
    if status == STATUS_WORKER_CRASHED:
        return None, _exc.WorkerCrashedError()
    if status == STATUS_OWNER_DIED:
        return None, _exc.OwnerDiedError(ref.hex())
    return None, _exc.ObjectLostError(ref.hex(), call_site=message)


def _timeout_ms(timeout):
    if timeout is None:
        return -1
    if timeout < 0:
        return -1
    return math.ceil(timeout * 1000 - 1e-6)  # rounded up: a get or wait never ends before its timeout


class _Blocked:
    """Around a get/wait that may wait, in a task's worker on its main thread:
    beamd lends the task's CPU back meanwhile, as Ray's raylet does for a
    blocked worker, so the tasks it waits for can run on a full node."""

    def __init__(self, rt, timeout_ms):
        self.client = None
        if rt.is_task and timeout_ms != 0 and threading.current_thread() is threading.main_thread():
            self.client = rt.client

    def __enter__(self):
        if self.client is not None:
            self.client.send("blocked", {"blocked": True})

    def __exit__(self, *exc):
        if self.client is not None:
            try:
                self.client.send("blocked", {"blocked": False})
            except ConnectionError:
                pass


def _get_values(ids, timeout_ms):
    """The daemon's [status, data] entries for ids (None: not ready). Values
    too large for one reply together are fetched in parts, as Ray would
    return them all."""
    import _beam

    rt = runtime()
    unique = list(dict.fromkeys(ids))  # a value asked for twice travels once
    try:
        entries = rt.client.request("get", {"objs": unique, "timeout_ms": timeout_ms})["values"]
        if len(unique) == len(ids):
            return entries
        got = dict(zip(unique, entries))
        return [got[i] for i in ids]
    except _beam.RemoteError as e:
        if (e.args[:1] != ("too_large",)) or len(unique) < 2:
            raise _remote_error(e) from None
    except ConnectionError as e:
        raise _lost_connection(e) from None
    deadline = _deadline(timeout_ms)
    got = {}
    half = len(unique) // 2
    for part in (unique[:half], unique[half:]):
        entries = _get_values(part, _left_ms(deadline))
        got.update(zip(part, entries))
        if _failed(entries):
            break  # an error ends the get, as it does in one reply
    return [got.get(i) for i in ids]


def _deadline(timeout_ms):
    """The time.monotonic() a wait of timeout_ms ends at (None: never)."""
    return None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000


def _left_ms(deadline):
    return -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))


def _secs(ms):
    return None if ms < 0 else ms / 1000


def _get_entries(ids, timeout_ms):
    """The [status, data] entries of ids (None: not ready), as _get_values
    gives them, taking the results beamd pushed to this client (a call's,
    submitted with push) from _beam's table, never asking beamd for them
    again. A list whose every id is expected there waits there alone, by a
    get's rule: until all came or one that came failed, or the timeout.
    Otherwise one get asks beamd for the others (not expected here, or
    pushed without their value) while the table is watched: an error
    pushed meanwhile ends the get at once, as an error in its reply does;
    then what is still to come is waited for in the table, in what is left
    of the timeout."""
    client = runtime().client
    deadline = _deadline(timeout_ms)
    try:
        entries = client.wait_results(ids, _secs(timeout_ms))
        fetch, watch, failed = [], [], False
        for i, e in zip(ids, entries):
            if e is None:
                watch.append(i)  # expected, not come
            elif e is False or e is True:
                fetch.append(i)  # beamd's to give
            elif e[0] != STATUS_OK:
                failed = True
        if not fetch and not watch:
            return entries
        if failed or (watch and False not in entries):
            return [e if type(e) is tuple else None for e in entries]  # an error first, or a timeout
        fetch = list(dict.fromkeys(fetch))
        watch = list(dict.fromkeys(watch))
        got = {}
        if fetch:
            if not watch:
                got = dict(zip(fetch, _get_values(fetch, _left_ms(deadline))))
            else:
                reply = _get_watching(client, fetch, watch, deadline)
                if reply is None:  # a pushed one failed first
                    entries = client.wait_results(ids, 0)
                    return [e if type(e) is tuple else None for e in entries]
                got = dict(zip(fetch, reply))
                if _failed(reply):
                    entries = client.wait_results(ids, 0)
                    return [e if type(e) is tuple else got.get(i) for i, e in zip(ids, entries)]
        if watch:
            came = client.wait_results(watch, _secs(_left_ms(deadline)))
            late = [i for i, e in zip(watch, came) if e is False or e is True]
            got.update((i, e if type(e) is tuple else None) for i, e in zip(watch, came))
            if late and not _failed(came) and None not in came:
                got.update(zip(late, _get_values(late, _left_ms(deadline))))
        return [e if type(e) is tuple else got.get(i) for i, e in zip(ids, entries)]
    except ConnectionError as e:
        raise _lost_connection(e) from None


def _failed(entries):
    """Whether one of entries (a get reply's [status, data] lists, the
    table's (status, data) tuples, or None/True/False for none) failed."""
    return any(type(e) in (tuple, list) and e[0] != STATUS_OK for e in entries)


def _get_watching(client, fetch, watch, deadline):
    """The entries of a get of fetch, or None when one of watch's pushed
    results comes with an error first."""
    import _beam

    try:
        reply = client.request_unless_failed("get", {"objs": fetch, "timeout_ms": _left_ms(deadline)}, watch)
    except _beam.RemoteError as e:
        if e.args[:1] != ("too_large",) or len(fetch) < 2:
            raise _remote_error(e) from None
        return _get_values(fetch, _left_ms(deadline))  # in parts, as _get_values does
    return None if reply is None else reply["values"]


def _get_one(client, ref, timeout_ms):
    """The [status, data] entry of one ref (None: not ready in time): from
    the table of pushed results when its call was submitted with push,
    else (or when its value was too large to push) by a get."""
    start = time.monotonic() if timeout_ms > 0 else 0
    try:
        entry = client.wait_result(ref._id, None if timeout_ms < 0 else timeout_ms / 1000)
    except ConnectionError as e:
        raise _lost_connection(e) from None
    if entry is None or type(entry) is tuple:
        return entry
    if entry is True and timeout_ms > 0:  # pushed without its value: what is left of the timeout
        timeout_ms = max(0, timeout_ms - int((time.monotonic() - start) * 1000))
    return _get_values([ref._id], timeout_ms)[0]  # not pushed here, or pushed without its value


def _direct_entries(ids, timeout_ms):
    """The entries of ids, some of them direct calls' refs (docs/DESIGN.md,
    "Direct calls"): those from their socket, the rest as _get_entries; in
    order, ending at the first error as a get does."""
    deadline = _deadline(timeout_ms)
    out = [None] * len(ids)
    rest = []
    for i, obj in enumerate(ids):
        e = _direct.entry(obj, deadline) if obj in _direct._refs else False
        if e is False:
            rest.append(i)
            continue
        if e is None:
            return out  # the timeout
        out[i] = e
        if e[0] != STATUS_OK:
            return out
    if rest:
        got = _get_entries([ids[i] for i in rest], _left_ms(deadline))
        for i, e in zip(rest, got):
            out[i] = e
    return out


def get(object_refs, *, timeout=None):
    """ray.get: one ref or a list of refs; order kept, duplicates allowed."""
    single = isinstance(object_refs, ObjectRef)
    if single:
        # one ref (a sync call's): what the list path below does for [ref]
        timeout_ms = _timeout_ms(timeout)
        if object_refs._id in _direct._refs:  # a direct call's (docs/DESIGN.md, "Direct calls")
            entry = _direct.entry(object_refs._id, None if timeout is None else _deadline(timeout_ms))
            if entry is False:  # promoted meanwhile: beamd's
                entry = _get_one(runtime().client, object_refs, timeout_ms)
        elif (rt := runtime()).is_task:
            with _Blocked(rt, timeout_ms):
                entry = _get_one(rt.client, object_refs, timeout_ms)
        else:  # (_Blocked does nothing outside a task's worker)
            entry = _get_one(rt.client, object_refs, timeout_ms)
        if entry is None:
            raise _exc.GetTimeoutError("Get timed out: some object(s) not ready.")
        value, error = _value(entry[0], entry[1], object_refs)
        if error is not None:
            raise error
        return value
    cg = sys.modules.get("ray.experimental.compiled_dag_ref")  # compiled-graph refs, if any were made
    if (
        cg is not None
        and not single
        and (
            isinstance(object_refs, cg.CompiledDAGRef)
            or (isinstance(object_refs, list) and any(isinstance(r, cg.CompiledDAGRef) for r in object_refs))
        )
    ):
        return cg._get(object_refs, timeout)
    if single:
        refs = [object_refs]
    elif isinstance(object_refs, list):
        refs = object_refs
        for r in refs:
            if not isinstance(r, ObjectRef):
                raise TypeError(f"Attempting to call `get` on the value {r!r:.100}, which is not an ray.ObjectRef.")
    else:
        raise ValueError(
            f"Invalid type of object refs, {type(object_refs)}, is given. 'object_refs' must either be an "
            f"ObjectRef or a list of ObjectRefs."
        )
    if not refs:
        return []
    timeout_ms = _timeout_ms(timeout)
    if _direct.ON and _direct._refs and any(r._id in _direct._refs for r in refs):
        values = _direct_entries([r._id for r in refs], timeout_ms)
    else:
        with _Blocked(runtime(), timeout_ms):
            values = _get_entries([r._id for r in refs], timeout_ms)
    out = []
    cache = {}
    for ref, entry in zip(refs, values):
        if entry is None:  # a failed ref ended the wait early; report that one
            out.append(None)
            continue
        if ref._id not in cache:
            cache[ref._id] = _value(entry[0], entry[1], ref)
        out.append(cache[ref._id])
    for item in out:
        if item is not None and item[1] is not None:
            raise item[1]
    if any(item is None for item in out):
        raise _exc.GetTimeoutError("Get timed out: some object(s) not ready.")
    results = [item[0] for item in out]
    return results[0] if single else results


def wait(ray_waitables, *, num_returns=1, timeout=None, fetch_local=True):
    """ray.wait: (ready, not_ready), both in input order."""
    if isinstance(ray_waitables, ObjectRef):
        raise TypeError("wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got a single ray.ObjectRef")
    if not isinstance(ray_waitables, list):
        raise TypeError(f"wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got {type(ray_waitables)}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"The 'timeout' argument must be nonnegative. Received {timeout}")
    for r in ray_waitables:
        if not isinstance(r, ObjectRef):
            raise TypeError(
                f"wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got list containing {type(r)}"
            )
    if not ray_waitables:
        return [], []
    if len(set(ray_waitables)) != len(ray_waitables):
        raise ValueError("Wait requires a list of unique ray_waitables.")
    if num_returns <= 0:
        raise ValueError("Invalid number of objects to return %d." % num_returns)
    if num_returns > len(ray_waitables):
        raise ValueError(
            "num_returns cannot be greater than the number of ray_waitables provided: %d > %d"
            % (num_returns, len(ray_waitables))
        )
    timeout_ms = _timeout_ms(timeout)
    if _direct.ON and _direct._refs and all(r._id in _direct._refs for r in ray_waitables):
        picked = _direct_wait(ray_waitables, num_returns, timeout_ms)
        if picked is not None:
            return [r for i, r in enumerate(ray_waitables) if i in picked], [
                r for i, r in enumerate(ray_waitables) if i not in picked
            ]
    if _direct.ON:
        for r in ray_waitables:
            _direct.promote(r._id)  # beamd answers the wait: it needs them
    with _Blocked(runtime(), timeout_ms):
        reply = _request(
            "wait", {"objs": [r._id for r in ray_waitables], "num_returns": num_returns, "timeout_ms": timeout_ms}
        )
    picked = set(reply["ready"])
    ready = [r for i, r in enumerate(ray_waitables) if i in picked]
    rest = [r for i, r in enumerate(ray_waitables) if i not in picked]
    return ready, rest


_DIRECT_WAIT_SLICE_S = 0.01  # one wait on one direct ref before the others are looked at again


def _direct_wait(refs, num_returns, timeout_ms):
    """ray.wait of direct calls' refs only (docs/DESIGN.md, "Direct calls"):
    answered from the results come on their sockets, read here, so no ref
    is promoted and none waits behind the worker's running call; the first
    num_returns ready, as indices. None when one turns out to be beamd's
    (promoted meanwhile, or its socket ended): beamd answers then."""
    deadline = _deadline(timeout_ms)
    ready = set()
    while True:
        for i, r in enumerate(refs):
            if i not in ready:
                got = _direct.entry(r._id, time.monotonic())  # what came, without waiting
                if got is False:
                    return None
                if got is not None:
                    ready.add(i)
        now = time.monotonic()
        if len(ready) >= num_returns or (deadline is not None and now >= deadline):
            return set(sorted(ready)[:num_returns])
        first = next(i for i in range(len(refs)) if i not in ready)
        left = _DIRECT_WAIT_SLICE_S if deadline is None else min(_DIRECT_WAIT_SLICE_S, deadline - now)
        got = _direct.entry(refs[first]._id, now + left)
        if got is False:
            return None
        if got is not None:
            ready.add(first)


def put(value, *, _owner=None):
    """ray.put: stores value inline in the daemon; returns its ObjectRef."""
    if isinstance(value, ObjectRef):
        raise TypeError(
            "Calling 'put' on an ray.ObjectRef is not allowed. If you really want to do this, you can wrap "
            "the ray.ObjectRef in a list and call 'put' on it."
        )
    rt = runtime()
    try:
        parts, size, objs, actors = _ser.dumps_parts(value)
    except Exception as e:
        raise TypeError(f"Could not serialize the put value {value!r:.100}: {e}") from e
    oid = rt.ids.object_id(_ids.KIND_PUT)
    params = _ser.with_refs({"obj": oid}, objs, actors)
    ref = ObjectRef(oid, _owned=True)
    try:
        send_value(rt, "put", params, parts, size)
    except ConnectionError as e:
        raise _lost_connection(e) from None
    return ref


def dumps_args(args, kwargs):
    """(args, kwargs) of a call dumped as serialization.dumps does, after
    each top-level argument of at least shm.MIN_BYTES (by its nbytes, or a
    bytes-like's length) is put first and passed as its ObjectRef, which the
    worker resolves: as Ray puts a large argument in its object store, so it
    is written once into shared memory and mapped by the worker.
    Returns (bytes, [object ids], [actor ids], refs put): the caller holds
    the refs until the request that carries their ids is sent, as their
    release is sent at once (refcount.prompt) and would come first."""
    if not kwargs and len(args) <= _ATOM_ARGS_MAX:
        for a in args:
            if type(a) not in _NEVER_LARGE:
                break
        else:  # only atoms: nothing to put, no ref inside (serialization.dumps's plain case)
            return _pickle.dumps((args, kwargs), protocol=_ser.PROTOCOL), [], [], None
    rt = runtime()
    if rt.shm and _any_large(args, kwargs):
        args = tuple(put(a) if _large(a) else a for a in args)
        kwargs = {k: put(v) if _large(v) else v for k, v in kwargs.items()}
        puts = [a for a in (*args, *kwargs.values()) if isinstance(a, ObjectRef)]
        return (*_ser.dumps((args, kwargs)), puts)
    return (*_ser.dumps((args, kwargs)), None)


# Types a top-level argument of a call most often has, which _large never
# finds large (it puts bytes-likes and values with an nbytes: not a str).
_NEVER_LARGE = frozenset((type(None), bool, int, float, str))
_ATOM_ARGS_MAX = 16  # within serialization's _PLAIN_MAX with the (args, {}) around them


def _any_large(args, kwargs):
    for a in args:
        if type(a) not in _NEVER_LARGE and _large(a):
            return True
    if kwargs:
        for a in kwargs.values():
            if type(a) not in _NEVER_LARGE and _large(a):
                return True
    return False


def _large(value):
    if isinstance(value, (bytes, bytearray)):
        return len(value) >= _shm.MIN_BYTES
    nbytes = getattr(value, "nbytes", None)
    return type(nbytes) is int and nbytes >= _shm.MIN_BYTES


def _settle(rt):
    """Sends the releases this process queued and waits until beamd has
    handled them (a round trip), so what they free is free."""
    rt.client.flush()
    rt.client.request("shm", {})


def send_value(rt, op, params, parts, size):
    """Sends a put or task_done (params without its data) carrying a value
    dumped as parts (serialization.dumps_parts) of size bytes: a large one
    through shared memory when this connection shares it (then the request
    waits for beamd's reply: ObjectStoreFullError when the node's
    object_store_memory cannot take it), anything else inline."""
    import _beam

    if rt.shm and size >= _shm.MIN_BYTES:
        memfd = _shm.write(parts, size, lambda: _settle(rt))
        try:
            rt.client.request(op, dict(params, data=b"", shm_fd=memfd.fd, shm_size=size))
            if op == "put":
                _refcount.prompt(params["obj"])  # its release is sent at once (refcount.py)
            return
        except _beam.RemoteError as e:
            if e.args[:1] == ("store_full",):
                raise _exc.ObjectStoreFullError(e.args[1]) from None
            if e.args[:1] != ("denied",):
                raise _remote_error(e) from None
            rt.shm = False  # beamd cannot open this process's fds: inline from now on
        finally:
            _shm.give_back(memfd)
    params["data"] = parts[0] if len(parts) == 1 else b"".join(parts)
    rt.client.send(op, params)


def status():
    """The local daemon's status table."""
    return _request("status", {})
