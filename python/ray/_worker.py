# SPDX-License-Identifier: Apache-2.0
"""The actor worker: ``python -m ray._worker``, started by beamd, one per actor.

It connects back to beamd with the id and token beamd put in its
environment, receives the pickled class and arguments (``init``), builds the
instance, then runs calls as Ray does:

- a plain actor (max_concurrency 1) runs them one at a time on the main
  thread, in the order they were submitted;
- a threaded actor (max_concurrency N > 1) on a pool of N threads, up to N
  at once, in no promised order;
- an asyncio actor (any ``async def`` method) on one event loop in a thread
  of its own, up to max_concurrency (default 1000) at once. The constructor
  and sync methods run on that loop's thread too, blocking it, as in Ray.

The main thread only reads pushes and hands calls out. It dies with beamd
(parent-death signal, and EOF on its socket).
"""

import asyncio
import inspect
import os
import signal
import sys
import threading
import traceback
import types

import _beam
import ray
from ray import exceptions
from ray import remote_function as _remote_function
from ray._private import direct as _direct
from ray._private import serialization as ser
from ray._private import worker as rtmod
from ray._private.object_ref import ObjectRef
from ray.actor import ActorHandle, _has_async_methods
from ray.exceptions import RayTaskError
from ray.remote_function import _TaskRunner

_FunctionType = types.FunctionType


class _DependencyFailed(Exception):
    """An argument's task failed (.error, the RayTaskError ray.get raised):
    this call fails without running, as Ray's raise_if_dependency_failed."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def _resolve_args(args, kwargs):
    """Top-level ObjectRef arguments are passed as their values, as in Ray."""
    refs = [a for a in args if isinstance(a, ObjectRef)]
    if kwargs:
        refs += [v for v in kwargs.values() if isinstance(v, ObjectRef)]
    if not refs:
        return args, kwargs

    try:
        values = ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        raise _DependencyFailed(e) from None
    return _substitute(args, kwargs, refs, values)


def _substitute(args, kwargs, refs, values):
    values = dict(zip(refs, values))
    args = tuple(values[a] if isinstance(a, ray.ObjectRef) else a for a in args)
    kwargs = {k: values[v] if isinstance(v, ray.ObjectRef) else v for k, v in kwargs.items()}
    return args, kwargs


async def _resolve_args_async(args, kwargs):
    """As _resolve_args, without blocking the event loop: an argument may be
    the result of another call to this very actor."""
    refs = [a for a in args if isinstance(a, ray.ObjectRef)]
    refs += [v for v in kwargs.values() if isinstance(v, ray.ObjectRef)]
    if not refs:
        return args, kwargs
    try:
        values = await asyncio.gather(*refs)
    except ray.exceptions.RayTaskError as e:
        raise _DependencyFailed(e) from None
    return _substitute(args, kwargs, refs, values)


def _exit_code(exc):
    """The exit status a SystemExit gives the process."""
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def _exit_now(exc):
    """Ends the process as an uncaught SystemExit would on the main thread."""
    code = _exit_code(exc)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _task_error(name, exc, class_name, actor_id, actor_repr=None, proctitle=None):
    cause = exc
    if isinstance(exc, _DependencyFailed):
        # as Ray prints it: the failed argument's error, as stored (a plain
        # RayTaskError), under Ray's sentence
        tb = (
            "Traceback (most recent call last):\n"
            "  At least one of the input arguments for this task could not be computed:\n"
            f"ray.exceptions.RayTaskError: {exc.error}\n"
        )
        cause = exc.error
    else:
        # the remote traceback starts at the user's code: this module's frames
        # (and the task runner's) go
        internal = (__file__, _remote_function.__file__)
        tb_top = exc.__traceback__
        while tb_top is not None and tb_top.tb_frame.f_code.co_filename in internal:
            tb_top = tb_top.tb_next
        tb = "".join(traceback.format_exception(type(exc), exc, tb_top))
    if isinstance(cause, RayTaskError):
        # a nested task's error (ray.get in this call raised it): the new
        # error wraps what the innermost task raised, so ray.get raises it
        # as RayTaskError(<that class>) at every level, as Ray's
        cause = cause.cause
    return RayTaskError(
        name,
        tb,
        cause,
        proctitle=proctitle or f"ray::{class_name}.{name}",
        pid=os.getpid(),
        actor_repr=actor_repr or class_name,
        actor_id=actor_id,
    )


def _actor_repr(instance):
    """The actor's own __repr__ when its class defines one (Ray's repr=)."""
    if instance is None or type(instance).__repr__ is object.__repr__:
        return None
    try:
        return repr(instance)
    except Exception:
        return None


class Worker:
    def __init__(self, rt):
        self.ser = ser
        self.exceptions = exceptions
        self.rt = rt
        self.client = rt.client
        self.instance = None
        self.class_name = "Actor"
        self.task = False  # a remote function's worker: class_name is the function's
        self.pool = None  # a threaded actor's threads
        self.loop = None  # an asyncio actor's event loop
        self.slots = None  # its asyncio.Semaphore(max_concurrency)
        self._omp_set = False  # OMP_NUM_THREADS was set here, not by the user
        self.direct = None  # the direct listener (direct.Server), once a driver opened it
        self.board = None  # its call board (_beam.Board): the direct calls beamd reads, once opened
        self.direct_methods = {}  # name -> bound method: the direct calls' method table (run_direct)

    def construct(self, init):
        for p in reversed(init.get("sys_path") or []):
            if p not in sys.path:
                sys.path.insert(0, p)
        self.class_name = init["class_name"]
        self.rt.gpu_ids = list(init.get("gpu_ids") or [])
        self.rt.actor_name = init.get("name") or None
        self.rt.placement_group_id = init.get("placement_group") or None
        self.rt.capture_child_tasks = bool(init.get("capture_child_tasks"))
        self.rt.namespace = init.get("namespace") or self.rt.namespace
        concurrency = max(1, int(init.get("max_concurrency") or 1))
        self.rt.assigned_resources = dict(init.get("resources") or {})
        self._set_omp_num_threads()
        # not counted: an actor's handle to itself must not keep it alive
        self.rt.actor_handle = ActorHandle(self.rt.actor_id, self.class_name, None, _counted=False)
        try:
            cls = ser.loads(init["class_data"])

            self.task = self.rt.is_task = cls is _TaskRunner
            args, kwargs = ser.loads(init["args"])
            if _has_async_methods(cls):
                self._start_loop(concurrency)
                future = asyncio.run_coroutine_threadsafe(self._construct_async(cls, args, kwargs), self.loop)
                self.instance = future.result()
            else:
                if concurrency > 1:
                    from concurrent.futures import ThreadPoolExecutor

                    self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="beam-actor")
                args, kwargs = _resolve_args(args, kwargs)
                self.instance = cls(*args, **kwargs)
        except Exception as e:
            err = _task_error("__init__", e, self.class_name, self.rt.actor_id.hex())
            self.client.send("actor_ready", {"ok": False, "error": str(err)})
            self.client.close()
            os._exit(1)
        self._announce_repr()
        self.client.send("actor_ready", {"ok": True})

    def _set_omp_num_threads(self):
        """As Ray's worker before a task or an actor's constructor runs
        (ray._private.utils.set_omp_num_threads_if_unset, Ray issue #6998):
        unless the user set OMP_NUM_THREADS, it is the whole CPUs the worker
        holds, at least 1, so each torch/numpy worker does not start one
        OpenMP thread per core of the machine. A pooled task worker taken by
        a new task sets it again from that task's CPUs."""
        if self._omp_set:
            os.environ.pop("OMP_NUM_THREADS", None)
        self._omp_set = "OMP_NUM_THREADS" not in os.environ
        if self._omp_set:
            cpus = self.rt.assigned_resources.get("CPU") or 1
            os.environ["OMP_NUM_THREADS"] = str(max(int(cpus), 1))

    def _announce_repr(self):
        """As Ray's worker after __init__: an actor whose class defines
        __repr__ prints it with Ray's ':actor_name:' mark on both streams, and
        the driver prints its later lines under that name."""
        if self.task or type(self.instance).__repr__ is object.__repr__:
            return
        try:
            token = f":actor_name:{repr(self.instance)}"
        except Exception:
            return
        if "\n" in token:
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                print(token, file=stream, flush=True)
            except Exception:
                pass

    def reuse(self, init):
        """An idle task worker taken from beamd's pool for a new task: it
        becomes that task's one-call actor (Ray reuses task workers too)."""
        self.rt.actor_id = bytes(init["actor"])
        self.instance = None
        self.direct_methods.clear()
        self.task = self.rt.is_task = False
        self.construct(init)

    def _start_loop(self, concurrency):
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.slots = asyncio.Semaphore(concurrency)
            started.set()
            self.loop.run_forever()

        # Ray's name for it; daemon: os._exit ends the process anyway
        threading.Thread(target=run, name="AsyncIO Thread: default", daemon=True).start()
        started.wait()

    async def _construct_async(self, cls, args, kwargs):
        args, kwargs = await _resolve_args_async(args, kwargs)
        return cls(*args, **kwargs)

    def _method(self, name):
        import inspect

        if name == "__ray_ready__":
            return lambda: True
        if name == "__ray_call__":
            return lambda fn, *a, **k: fn(self.instance, *a, **k)
        if name == _direct.OPEN:
            return self._direct_open
        # the method comes from the class, as Ray's method table: neither an
        # instance attribute of the same name nor an instance __getattr__ counts
        cls = type(self.instance)
        attr = cls.__dict__.get(name)
        if type(attr) is _FunctionType and type(cls) is type:
            # a plain function in the class's own dict: what getattr_static
            # finds first, bound as below
            return attr.__get__(self.instance, cls)
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            raise AttributeError(f"'{self.class_name}' object has no attribute '{name}'") from None
        get = getattr(type(attr), "__get__", None)
        return get(attr, self.instance, cls) if get is not None else attr

    def _direct_open(self):
        """A driver asks for direct calls (docs/DESIGN.md, "Direct calls"):
        only a plain serial actor's worker opens its socket; its main loop
        then serves it beside beamd's pushes (serve)."""
        if self.pool is not None or self.loop is not None or self.task:
            return None
        if self.direct is None:
            self._hand_board()
            self.direct = _direct.Server(self)
            self.direct.start_reading_beamd(self.client, beamd_gone)
        return self.direct.reply()

    def _hand_board(self):
        """The call board beamd reads this worker's direct calls from
        (docs/DESIGN.md, "Direct calls"): made and handed over once (on a
        member, its own daemon takes it). A refusal leaves the calls
        uncounted, never stops them."""
        self.board = _beam.Board()
        try:
            self.client.request("board", {"fd": self.board.fileno(), "size": self.board.size})
        except _beam.RemoteError:
            pass  # e.g. beamd could not open the fd: the calls go on, uncounted

    def run_direct(self, obj, name, args):
        """Runs one direct call on this thread; returns its outcome (the
        board counts it started and finished before its result is sent)."""
        self.rt.task_id = obj[:24]
        self.board.start()
        try:
            args, kwargs = self.ser.loads(args)
            method = self.direct_methods.get(name)
            if method is None:
                method = self._method(name)
                cls = type(self.instance)
                if type(cls) is type and type(cls.__dict__.get(name)) is _FunctionType:
                    self.direct_methods[name] = method  # a class's own function, bound: the same every call
            return (True, method(*args, **kwargs))
        except Exception as e:
            return (False, e)
        except BaseException as e:
            if isinstance(e, SystemExit) and _exit_code(e) == 0:
                self._exits_on_purpose()
            raise
        finally:
            self.board.finish()

    def _terminate(self, params):
        self.client.send("task_done", {"obj": params["obj"], "status": 0, "exiting": True, "data": ser.dumps(None)[0]})
        # a graceful exit, as Ray's: atexit handlers run (ray.kill's does
        # not), before the connection closes (beamd kills the worker then)
        import atexit

        try:
            atexit._run_exitfuncs()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            self.client.close()
            os._exit(0)

    def call(self, params):
        """Runs one call on this thread and sends its result."""
        ser = self.ser  # imported once: a call's path runs this per call

        name = params["method"]
        if name == "__ray_terminate__":
            self._terminate(params)
        self.rt.task_id = params["obj"][:24]  # an ObjectID starts with its TaskID
        try:
            args, kwargs = ser.loads(params["args"])
            args, kwargs = _resolve_args(args, kwargs)
            outcome = (True, self._method(name)(*args, **kwargs))
            # the arguments go before the result is sent: a large one's
            # mapping with them, so its producer finds its memfd free for
            # its next value once it has this result (shm.py's pool)
            del args, kwargs
        except Exception as e:
            outcome = (False, e)
        except BaseException as e:
            if not self.task:
                if isinstance(e, SystemExit) and _exit_code(e) == 0:
                    self._exits_on_purpose()
                raise
            self._task_base_exception(params, e)
            return
        self.finish(params, outcome)

    def _task_base_exception(self, params, exc):
        """A task raised a BaseException that is not an Exception, as Ray
        2.43 reports it: KeyboardInterrupt is a cancellation (the task fails
        with TaskCancelledError, the worker lives on); anything else
        (SystemExit, sys.exit(), a BaseException subclass) ends the worker
        and the task runs again while it has retries left (Ray 2.43 retries
        it too), then the caller gets WorkerCrashedError."""
        if isinstance(exc, KeyboardInterrupt):
            tid = params["obj"][:24].hex()
            cancelled = exceptions.TaskCancelledError(f"TaskID({tid})")
            err = _task_error(self.class_name, exc, None, None, proctitle=f"ray::{self.class_name}")
            lines = err.traceback_str.rstrip("\n").split("\n")
            # the remote traceback ends in the cancellation, as in Ray
            lines[-1] = f"ray.exceptions.TaskCancelledError: {cancelled}"
            err = exceptions.RayTaskError(
                self.class_name,
                "\n".join(lines) + "\n",
                cancelled,
                proctitle=f"ray::{self.class_name}",
                pid=os.getpid(),
            )
            self.reply(params["obj"], 1, ser.dumps(err)[0], [], [])
            self.client.flush()
            return
        # the worker just ends, as Ray's does: beamd runs the task again on
        # a new worker while it has retries left (max_retries, as for any
        # death of its worker), then fails it with WorkerCrashedError
        self.client.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    async def call_async(self, params):
        """Runs one call on the event loop (a sync method blocks it, as in
        Ray) and sends its result."""
        async with self.slots:
            name = params["method"]
            if name == "__ray_terminate__":
                self._terminate(params)
            self.rt.task_id = params["obj"][:24]
            try:
                args, kwargs = ser.loads(params["args"])
                args, kwargs = await _resolve_args_async(args, kwargs)
                result = self._method(name)(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                outcome = (True, result)
                del args, kwargs  # before the result is sent, as in call()
            except Exception as e:
                outcome = (False, e)
            self.finish(params, outcome)

    def call_in_thread(self, params):
        """call() on a pool thread: sys.exit() in a method ends the actor as
        it does on the main thread, rather than only that thread."""
        try:
            self.call(params)
        except SystemExit as e:
            _exit_now(e)

    async def call_on_loop(self, params):
        try:
            await self.call_async(params)
        except SystemExit as e:
            if _exit_code(e) == 0:
                self._exits_on_purpose()
            _exit_now(e)

    def _exits_on_purpose(self):
        """sys.exit() or sys.exit(0) (Ray's exit_actor()) in a method: the
        actor ends on purpose (`exiting`), so beamd does not restart it
        (max_restarts); its calls fail with ActorDiedError once the process
        is gone, as in Ray 2.43. Another exit status is an unexpected exit
        there: the actor restarts."""
        try:
            self.client.send("exiting", {})
            self.client.flush()
        except Exception:
            pass  # its connection is gone: beamd sees the exit alone

    def _error(self, name, exc):
        if self.task:  # Ray's header for a task: ray::f(), no actor
            return _task_error(self.class_name, exc, None, None, proctitle=f"ray::{self.class_name}")
        return _task_error(name, exc, self.class_name, self.rt.actor_id.hex(), _actor_repr(self.instance))

    def finish(self, params, outcome):
        """Pickles a call's outcome, (True, value) or (False, exception),
        sends it as the call's result, and sends queued releases."""
        ser = self.ser  # imported once: a call's path runs this per call

        name = params["method"]
        status, objs, actors = 0, [], []
        try:
            ok, value = outcome
            if not ok:
                raise value
            data, _, objs, actors = ser.dumps_parts(value)  # parts: send_value joins or maps them
        except Exception as e:
            status = 1
            err = self._error(name, e)
            try:
                data = ser.dumps(err)[0]
            except Exception as pickle_error:
                data = ser.dumps(self._error(name, TypeError(f"the error could not be pickled: {pickle_error}")))[0]
        try:
            self.reply(params["obj"], status, data, objs, actors)
        except ValueError as e:
            # the result does not fit in one frame: the call fails, the actor lives
            data = None  # drop the result before building the error
            err = self._error(name, ValueError(f"the result of {self.class_name}.{name}() could not be sent: {e}"))
            self.reply(params["obj"], 1, ser.dumps(err)[0], [], [])
        except self.exceptions.ObjectStoreFullError as e:
            # the node's object_store_memory cannot take the result: the call fails with it, as in Ray
            data = None  # drop the result before building the error
            self.reply(params["obj"], 1, ser.dumps(self._error(name, e))[0], [], [])
        # the call's refs died with it; _beam only sends queued releases
        # with a later message, and an idle worker sends none
        try:
            self.client.flush()
        except ConnectionError:
            os._exit(0)

    def reply(self, obj, status, data, objs, actors):
        """Sends a call's result: data is bytes, or a value's parts
        (serialization.dumps_parts), which go through shared memory when
        large (worker.send_value)."""
        ser = self.ser  # imported once: a call's path runs this per call

        if type(data) is list:
            size = sum(memoryview(p).nbytes for p in data)
            rtmod.send_value(
                self.rt, "task_done", ser.with_refs({"obj": obj, "status": status}, objs, actors), data, size
            )
            return
        self.client.send("task_done", ser.with_refs({"obj": obj, "status": status, "data": data}, objs, actors))

    def serve(self):
        while True:
            if self.direct is not None:
                self.direct.serve_forever()  # beamd's pushes come through it now
            try:
                push = self.client.next_push()
            except ConnectionError:
                beamd_gone(0)  # beamd is gone: so is this actor
            if push is None:
                continue
            op, params = push
            if op == "init" and self.task:
                self.reuse(params)
                continue
            if op != "call":
                continue
            if self.loop is not None:
                asyncio.run_coroutine_threadsafe(self.call_on_loop(params), self.loop)
            elif self.pool is not None:
                self.pool.submit(self.call_in_thread, params)
            else:
                self.call(params)  # (its finish sends the queued releases)


# --- the processes an actor starts die with it -------------------------------
# The worker is a child subreaper: whatever its processes leave behind (a
# double fork, a start_new_session child whose parent exits) is re-parented
# to it, not to init, so everything the actor started stays below it. When
# the worker dies, beamd (a subreaper too) gets all of it and kills it
# (src/procs.c). When beamd dies first, the worker kills all of it, then
# exits: on its parent-death signal, in a thread woken by beamd's pidfd
# (which runs even while the main thread is busy in C code), or when its
# connection to beamd ends (Worker.serve), whichever comes first.

_PR_SET_CHILD_SUBREAPER = 36
_BEAMD_GONE = signal.SIGRTMIN + 4  # the parent-death signal; nothing else sends it


def _descendants():
    """Live processes below this one, by the PPid chains in /proc."""
    kids = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue
            if state != b"Z":
                kids.setdefault(int(ppid), []).append(int(entry))
    out, todo = [], [os.getpid()]
    while todo:
        for pid in kids.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def kill_descendants():
    """SIGKILLs every process below this one until none is left (the
    children of one killed mid-fork come here, for the next pass)."""
    import time

    for _ in range(1000):
        pids = _descendants()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)


def beamd_gone(code=1):
    """Ends the worker when beamd is gone, and everything it started with it."""
    kill_descendants()
    os._exit(code)


def guard_descendants(beamd_pid):
    """Makes this worker a subreaper and arms its end with beamd's. Returns
    its parent's pid once armed (1, or not beamd_pid, when beamd is gone)."""
    import ctypes
    import select
    import threading

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(_BEAMD_GONE, lambda *_: beamd_gone())
    ppid = _beam.set_parent_death_signal(_BEAMD_GONE)
    try:
        fd = os.pidfd_open(ppid)
    except OSError:  # gone already (ppid then says so), or a kernel before 5.3
        return ppid

    def watch():
        select.select([fd], [], [])
        beamd_gone()

    threading.Thread(target=watch, name="beam-beamd-watch", daemon=True).start()
    return ppid


def take_place():
    """Where Ray's raylet puts a worker: a process group of its own (beamd's
    kill of the group reaches what it starts), still in beamd's session (one
    scheduling group with the node's driver where the kernel groups by
    session). libuv can only start a child in a session of its own, so the
    worker does this itself, before it starts anything."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already a group leader


def nice_main_thread():
    """The worker's niceness, RAY_worker_niceness (15 unless set), so the
    driver that feeds it runs first: on the main thread only, once the
    runtime's first threads run (the _beam client's, the beamd watch), as
    Ray's worker calls nice() at the end of its core worker's setup. Linux's
    nice is per thread: the runtime's threads stay at the driver's niceness,
    and every thread the main thread starts later (the user's, OpenMP's,
    gloo's) inherits the worker's."""
    try:
        os.nice(int(os.environ.get("BEAM_WORKER_NICENESS", "0") or 0))
    except (OSError, ValueError):
        pass  # a negative value needs privilege; Ray's worker runs on as well


def main():
    take_place()
    parent = int(os.environ.get("BEAM_PARENT_PID", "0") or 0)
    ppid = guard_descendants(parent)
    if ppid == 1 or (parent and ppid != parent):
        os._exit(1)

    actor_id = bytes.fromhex(os.environ["BEAM_ACTOR_ID"])
    rt = rtmod.connect_worker(os.environ["BEAM_SOCKET"], actor_id, os.environ["BEAM_WORKER_TOKEN"])
    nice_main_thread()
    push = rt.client.next_push()
    if push is None or push[0] != "init":
        os._exit(1)
    worker = Worker(rt)
    worker.construct(push[1])
    worker.serve()


if __name__ == "__main__":
    main()
