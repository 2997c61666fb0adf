# SPDX-License-Identifier: Apache-2.0
"""Ray's exception hierarchy, as beam raises it.

This module owns every class that ``ray.exceptions`` has in Ray 2.43 and that
costs nothing to carry: the names, the base classes (so ``except`` clauses and
``isinstance`` checks written against Ray behave the same), the constructor
signatures and the messages. It talks to no daemon and imports nothing from
the rest of beam at import time.

How the runtime uses it:

* A method that raises inside a worker is stored as
  ``RayTaskError(function_name, traceback_str, cause, proctitle=..., pid=...,
  ip=..., actor_repr=..., actor_id=...)``; ``RayTaskError.from_exception(
  function_name, exc, **same_keywords)`` builds the same thing and formats the
  traceback from ``exc`` itself. If ``cause`` cannot be pickled it is replaced,
  at construction, by a ``RayError`` that says so, so the error always travels.
* ``ray.get`` raises ``err.as_instanceof_cause()``: an instance of a class named
  ``RayTaskError(<CauseName>)`` that derives from both ``RayTaskError`` and the
  cause's class, so ``except ValueError`` still catches a remote ValueError.
* A dead or killed actor gives ``ActorDiedError`` (a ``RayActorError``); build
  one with a message as ``ActorDiedError(error_msg="...", actor_id=hex)``.
* ``ray.get(..., timeout=...)`` expiring gives ``GetTimeoutError``, which is
  also the builtin ``TimeoutError``.

Every class pickles: ``RayError.__reduce__`` rebuilds an instance from its
``args`` and ``__dict__`` without calling ``__init__`` (Ray's constructors take
arguments that plain exception pickling would lose), and ``RayTaskError`` and
its dual classes have their own reduction that rebuilds them by value.
"""

import logging
import os
import threading
import traceback as _traceback

from ray._private import services

logger = logging.getLogger(__name__)

# Frames from these parts of beam's ``ray`` package are plumbing, not the
# user's code; they are left out of a RayTaskError's printed traceback.
_INTERNAL_FRAME_MARKERS = (
    "ray/_private/",
    "ray/_worker.py",
    "ray/worker.py",
    "ray/util/tracing/",
)


def _node_ip_address():
    """Return this node's IP for an error header; never raises."""
    try:
        return services.get_node_ip_address()
    except Exception:
        return "127.0.0.1"


def _rebuild(cls, args, state):
    """Unpickle helper: make a ``cls`` from ``args`` and ``state`` without
    running ``cls.__init__``."""
    obj = cls.__new__(cls, *args)
    obj.args = args
    if state:
        obj.__dict__.update(state)
    return obj


class RayError(Exception):
    """Base class of every error beam's ``ray`` raises."""

    def __reduce__(self):
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def to_bytes(self):
        """Serialize this error (cloudpickle); the inverse is ``from_bytes``."""
        import cloudpickle

        return cloudpickle.dumps(self)

    @staticmethod
    def from_bytes(data):
        """Deserialize an error made by ``to_bytes``."""
        import cloudpickle

        return cloudpickle.loads(data)


class CrossLanguageError(RayError):
    """An error raised by code written in another language.

    beam runs only Python; the class exists so code that names it imports.
    """

    def __init__(self, ray_exception):
        language = getattr(ray_exception, "language", "another language")
        text = getattr(ray_exception, "formatted_exception_string", ray_exception)
        super().__init__(f"An exception raised from {language}:\n{text}")


class TaskCancelledError(RayError):
    """The task, or a task it depended on, was cancelled."""

    def __init__(self, task_id=None, error_message=None):
        self.task_id = task_id
        self.error_message = error_message

    def __str__(self):
        msg = ""
        if self.task_id:
            msg = f"Task: {self.task_id} was cancelled. "
        if self.error_message:
            msg += self.error_message
        return msg


# --------------------------------------------------------------------------
# RayTaskError and its dual classes


_dual_classes = {}
_dual_classes_lock = threading.Lock()


def _dual_class_for(cause_cls):
    """Return the cached class deriving from RayTaskError and ``cause_cls``.

    Raises TypeError when ``cause_cls`` cannot be a base class next to
    RayTaskError (a final type, or an incompatible instance layout).
    """
    with _dual_classes_lock:
        dual = _dual_classes.get(cause_cls)
        if dual is None:
            name = f"RayTaskError({cause_cls.__name__})"
            dual = type(
                name,
                (_DualMixin, RayTaskError, cause_cls),
                {"__qualname__": name, "__module__": __name__},
            )
            _dual_classes[cause_cls] = dual
        return dual


def _rebuild_task_error(cls, fields):
    """Unpickle helper for a plain RayTaskError (or a named subclass)."""
    return cls(*fields)


def _rebuild_dual(fields):
    """Unpickle helper for a dual ``RayTaskError(<Cause>)`` instance."""
    return RayTaskError(*fields).as_instanceof_cause()


class RayTaskError(RayError):
    """A remote task or actor method raised; this wraps what it raised.

    Fields: ``function_name``, ``traceback_str`` (the remote traceback as
    text), ``cause`` (the exception object itself), ``proctitle``, ``pid``,
    ``ip``, ``actor_repr`` and ``_actor_id`` (hex, or None for a task).
    """

    def __init__(
        self,
        function_name,
        traceback_str,
        cause,
        proctitle=None,
        pid=None,
        ip=None,
        actor_repr=None,
        actor_id=None,
    ):
        self.function_name = function_name
        if traceback_str is None:
            traceback_str = _format_cause(cause)
        self.traceback_str = traceback_str
        self.proctitle = proctitle or f"ray::{function_name}"
        self.pid = pid or os.getpid()
        self.ip = ip or _node_ip_address()
        self.actor_repr = actor_repr
        self._actor_id = actor_id
        self.cause = _picklable_cause(cause)
        # Ray keeps these six in ``args``; here they hold the values in use
        # (defaults filled in), so ``args`` survives a pickle round trip.
        self.args = (
            function_name,
            traceback_str,
            self.cause,
            self.proctitle,
            self.pid,
            self.ip,
        )

    @classmethod
    def from_exception(
        cls,
        function_name,
        exc,
        traceback_str=None,
        proctitle=None,
        pid=None,
        ip=None,
        actor_repr=None,
        actor_id=None,
    ):
        """Wrap ``exc`` (just caught) as a RayTaskError.

        When ``traceback_str`` is None it is formatted from ``exc`` and its
        ``__traceback__``.
        """
        if traceback_str is None:
            traceback_str = _format_cause(exc)
        return cls(
            function_name,
            traceback_str,
            exc,
            proctitle=proctitle,
            pid=pid,
            ip=ip,
            actor_repr=actor_repr,
            actor_id=actor_id,
        )

    def _fields(self):
        return (
            self.function_name,
            self.traceback_str,
            self.cause,
            self.proctitle,
            self.pid,
            self.ip,
            self.actor_repr,
            self._actor_id,
        )

    def __reduce__(self):
        return (_rebuild_task_error, (type(self), self._fields()))

    def make_picklable(self):
        """Replace ``cause`` by a RayError if it no longer pickles; return self.

        Construction already does this; call it again if the cause was
        changed afterwards.
        """
        self.cause = _picklable_cause(self.cause)
        self.args = (self.args[0], self.args[1], self.cause) + tuple(self.args[3:])
        return self

    def make_dual_exception_type(self):
        """Return the class deriving from RayTaskError and the cause's class.

        Raises TypeError when the cause's class cannot be subclassed.
        """
        return _dual_class_for(type(self.cause))

    def as_instanceof_cause(self):
        """Return this error as an instance of the cause's class too.

        The result's class is named ``RayTaskError(<CauseName>)``; it has
        ``.cause``, ``args == (cause,)``, the cause's attributes (looked up on
        the cause) and this error's text. Returns ``self`` when the cause is
        already a RayTaskError, when RayTaskError already is a subclass of the
        cause's class, or (with a warning) when that class cannot be
        subclassed.
        """
        cause_cls = type(self.cause)
        if isinstance(self.cause, RayTaskError) or issubclass(RayTaskError, cause_cls):
            return self
        try:
            dual_cls = self.make_dual_exception_type()
            dual = dual_cls(self.cause)
        except TypeError as err:
            # Ray's sentence, word for word
            logger.warning(
                f"User exception type {cause_cls} in RayTaskError can't be subclassed! This exception is raised "
                f"as RayTaskError only. You can use `ray_task_error.cause` to access the user exception. Failure "
                f"in subclassing: {err}"
            )
            return self
        dual.__dict__.update(
            function_name=self.function_name,
            traceback_str=self.traceback_str,
            proctitle=self.proctitle,
            pid=self.pid,
            ip=self.ip,
            actor_repr=self.actor_repr,
            _actor_id=self._actor_id,
        )
        return dual

    def _header(self):
        header = f"{self.proctitle}() (pid={self.pid}, ip={self.ip}"
        if self.actor_repr:
            header += f", actor_id={self._actor_id}, repr={self.actor_repr}"
        return header + ")"

    def __str__(self):
        """The header line, then the remote traceback without beam's frames."""
        lines = (self.traceback_str or "").strip().split("\n")
        out = []
        saw_header = False
        skip_code_line = False
        for line in lines:
            if skip_code_line:
                # the frame's source line and, on 3.11+, its caret line
                if line.startswith("    "):
                    continue
                skip_code_line = False
            if line.startswith("Traceback "):
                out.append(self._header())
                saw_header = True
            elif line.startswith("  File ") and _is_internal_frame(line):
                skip_code_line = True
            else:
                out.append(line)
        if not saw_header:
            out.insert(0, self._header())
        return "\n".join(out)


class _DualMixin:
    """Behaviour shared by every ``RayTaskError(<Cause>)`` class.

    Instances are made by ``RayTaskError.as_instanceof_cause`` only; neither
    RayTaskError's nor the cause's ``__init__`` runs for them.
    """

    def __init__(self, cause):
        self.cause = cause
        self.args = (cause,)

    def __getattr__(self, name):
        # Only reached for names the instance and its classes lack. "cause"
        # itself is excluded so a half-built instance (during unpickling or
        # copying) does not recurse.
        if name == "cause" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(self.__dict__["cause"], name)

    def __reduce__(self):
        return (_rebuild_dual, (self._fields(),))

    def __str__(self):
        return RayTaskError.__str__(self)


def _format_cause(cause):
    """Format ``cause`` (an exception) the way the traceback module would."""
    if isinstance(cause, BaseException):
        return "".join(_traceback.format_exception(type(cause), cause, cause.__traceback__))
    return f"{type(cause).__name__}: {cause}"


def _is_internal_frame(line):
    path = line.replace("\\", "/")
    return any(marker in path for marker in _INTERNAL_FRAME_MARKERS)


def _picklable_cause(cause):
    """Return ``cause`` if it survives a cloudpickle round trip, else a
    RayError saying it does not.

    Loading is checked too: an exception whose ``__init__`` takes other
    arguments than it passes to ``Exception.__init__`` pickles but cannot be
    unpickled, and would otherwise fail later, in the caller's ``ray.get``.
    """
    import cloudpickle

    try:
        cloudpickle.loads(cloudpickle.dumps(cause))
    except Exception as err:
        msg = (
            f"The original cause of the RayTaskError ({type(cause)}) isn't "
            f"serializable: {err}. Overwriting the cause to a RayError."
        )
        logger.warning(msg)
        return RayError(msg)
    return cause


# --------------------------------------------------------------------------
# Process, node and actor failures


class LocalRayletDiedError(RayError):
    """The node's daemon (beamd, Ray's raylet) died under the task."""

    def __str__(self):
        return "The task's local raylet died. Check raylet.out for more information."


class WorkerCrashedError(RayError):
    """The worker process died while it ran the task."""

    def __str__(self):
        return (
            "The worker died unexpectedly while executing this task. "
            "Check python-core-worker-*.log files for more information."
        )


class RayActorError(RayError):
    """An actor could not finish a task: it died, or is unreachable for now.

    ``actor_id`` is the actor's hex id (or None), ``error_msg`` the full
    message, and the ``actor_init_failed`` / ``preempted`` properties say
    whether its constructor raised and whether its node was preempted.
    """

    BASE_ERROR_MSG = "The actor experienced an error before finishing this task."

    def __init__(
        self,
        actor_id=None,
        error_msg=BASE_ERROR_MSG,
        actor_init_failed=False,
        preempted=False,
    ):
        self.actor_id = actor_id
        self.error_msg = error_msg
        self._actor_init_failed = actor_init_failed
        self._preempted = preempted

    def __str__(self):
        return self.error_msg

    @property
    def actor_init_failed(self):
        return self._actor_init_failed

    @property
    def preempted(self):
        return self._preempted


class ActorDiedError(RayActorError):
    """The actor is dead: its process exited, crashed or was killed, its node
    died, or its constructor raised.

    ``ActorDiedError()`` carries BASE_ERROR_MSG; ``ActorDiedError(task_error)``
    (a RayTaskError from ``__init__``) marks ``actor_init_failed`` and quotes
    it; beam's runtime says what happened with
    ``ActorDiedError(error_msg="...", actor_id=hex)`` (a plain string as the
    first argument is taken as the message too).
    """

    BASE_ERROR_MSG = "The actor died unexpectedly before finishing this task."

    def __init__(
        self,
        cause=None,
        *,
        error_msg=None,
        actor_id=None,
        actor_init_failed=False,
        preempted=False,
    ):
        message = ActorDiedError.BASE_ERROR_MSG
        if isinstance(cause, RayTaskError):
            actor_init_failed = True
            actor_id = actor_id or cause._actor_id
            message = "The actor died because of an error raised in its creation " f"task, {cause}"
        elif isinstance(cause, str):
            message = cause
        elif cause:
            message = f"{ActorDiedError.BASE_ERROR_MSG}\n{cause}"
        if error_msg is not None:
            message = error_msg
        super().__init__(actor_id, message, actor_init_failed, preempted)

    @staticmethod
    def from_task_error(task_error):
        return ActorDiedError(task_error)


class ActorUnavailableError(RayActorError):
    """The actor cannot be reached right now but may come back; the task may
    or may not have run."""

    def __init__(self, error_message, actor_id):
        if isinstance(actor_id, (bytes, bytearray)):
            actor_id = bytes(actor_id).hex()
        msg = (
            f"The actor {actor_id} is unavailable: {error_message}. The task may "
            "or may not have been executed on the actor."
        )
        super().__init__(actor_id, msg, False, False)


class RaySystemError(RayError):
    """beam itself failed (the daemon went away, a protocol error, ...)."""

    def __init__(self, client_exc, traceback_str=None):
        self.client_exc = client_exc
        self.traceback_str = traceback_str

    def __str__(self):
        msg = f"System error: {self.client_exc}"
        if self.traceback_str:
            msg += f"\ntraceback: {self.traceback_str}"
        return msg


class UserCodeException(RayError):
    """Wraps an exception raised by user code inside the runtime."""


class ObjectStoreFullError(RayError):
    """An object could not be stored: the object store is full."""

    def __str__(self):
        return super().__str__() + (
            "\nThe local object store is full of objects that are still in "
            "scope and cannot be evicted. Tip: Use the `ray memory` command "
            "to list active objects in the cluster."
        )


class OutOfDiskError(RayError):
    """An object could not be stored: the object store and the disk are full."""

    def __str__(self):
        return super().__str__() + (
            "\nThe object cannot be created because the local object store "
            "is full and the local disk's utilization is over capacity "
            "(95% by default). Tip: Use `df` on this node to check disk usage "
            "and `ray memory` to check object store memory usage."
        )


class OutOfMemoryError(RayError):
    """The node ran low on memory and the task or actor was killed for it."""

    def __init__(self, message):
        self.message = message

    def __str__(self):
        return self.message


class NodeDiedError(RayError):
    """The node is dead or cannot be reached."""

    def __init__(self, message):
        self.message = message

    def __str__(self):
        return self.message


# --------------------------------------------------------------------------
# Lost objects


class ObjectLostError(RayError):
    """An object's value is gone: every copy was lost (node failure or a
    system error).

    ``object_ref_hex`` names the object; ``owner_address`` and ``call_site``
    say who made it and where, when known.
    """

    def __init__(self, object_ref_hex, owner_address=None, call_site=""):
        self.object_ref_hex = object_ref_hex
        self.owner_address = owner_address
        # Ray joins call-stack lines with " | "; print them one per line.
        self.call_site = (call_site or "").replace(" | ", "\n  ")

    def _base_str(self):
        msg = f"Failed to retrieve object {self.object_ref_hex}. "
        if self.call_site:
            return msg + f"The ObjectRef was created at: {self.call_site}"
        return msg + (
            "To see information about where this ObjectRef was created in "
            "Python, set the environment variable RAY_record_ref_creation_sites=1 "
            "during `ray start` and `ray.init()`."
        )

    def _detail(self):
        return (
            f"All copies of {self.object_ref_hex} have been lost due to node "
            "failure. Check cluster logs (`/tmp/ray/session_latest/logs`) for "
            "more information about the failure."
        )

    def __str__(self):
        return self._base_str() + "\n\n" + self._detail()


class ObjectFetchTimedOutError(ObjectLostError):
    """Fetching the object timed out: no copy could be located."""

    def _detail(self):
        return (
            f"Fetch for object {self.object_ref_hex} timed out because no "
            "locations were found for the object. This may indicate a "
            "system-level bug."
        )


class RpcError(RayError):
    """The underlying RPC failed."""

    def __init__(self, message, rpc_code=None):
        self.message = message
        self.rpc_code = rpc_code

    def __str__(self):
        return self.message


class ReferenceCountingAssertionError(ObjectLostError, AssertionError):
    """The object was deleted while a reference to it was still live."""

    def _detail(self):
        return "The object has already been deleted by the reference counting " "protocol. This should not happen."


class ObjectFreedError(ObjectLostError):
    """The object was freed on purpose by the application."""

    def _detail(self):
        return (
            "The object was manually freed using the internal `free` call. "
            "Please ensure that `free` is only called once the object is no "
            "longer needed."
        )


class OwnerDiedError(ObjectLostError):
    """The process that owned the object (made it with ``.remote()`` or
    ``ray.put()``) exited while the object was still referenced."""

    def _detail(self):
        return (
            "The object's owner has exited. This is the Python worker that "
            "first created the ObjectRef via `.remote()` or `ray.put()`. Check "
            "cluster logs (`/tmp/ray/session_latest/logs`) for more "
            "information about the Python worker failure."
        )


class ObjectReconstructionFailedError(ObjectLostError):
    """The object was lost and cannot be rebuilt."""

    def _detail(self):
        return (
            "The object cannot be reconstructed because it was created by an "
            "actor, ray.put() call, or its ObjectRef was created by a "
            "different worker."
        )


class ObjectReconstructionFailedMaxAttemptsExceededError(ObjectLostError):
    """The object was lost and its task ran out of retries."""

    def _detail(self):
        return (
            "The object cannot be reconstructed because the maximum number of "
            "task retries has been exceeded. To prevent this error, set "
            "`@ray.remote(max_retries=<num retries>)` (default 3)."
        )


class ObjectReconstructionFailedLineageEvictedError(ObjectLostError):
    """The object was lost and its lineage was dropped to save memory."""

    def _detail(self):
        return (
            "The object cannot be reconstructed because its lineage has been "
            "evicted to reduce memory pressure. To prevent this error, set the "
            "environment variable RAY_max_lineage_bytes=<bytes> (default 1GB) "
            "during `ray start`."
        )


# --------------------------------------------------------------------------
# Timeouts, scheduling and the rest


class GetTimeoutError(RayError, TimeoutError):
    """``ray.get`` (or another wait) timed out; also a builtin TimeoutError."""


class PlasmaObjectNotAvailable(RayError):
    """An object was not available within the timeout."""


class AsyncioActorExit(RayError):
    """An asyncio actor asked to exit (``ray.actor.exit_actor()``)."""


class RuntimeEnvSetupError(RayError):
    """The task's or actor's runtime environment could not be set up."""

    def __init__(self, error_message=None):
        self.error_message = error_message

    def __str__(self):
        msgs = ["Failed to set up runtime environment."]
        if self.error_message:
            msgs.append(self.error_message)
        return "\n".join(msgs)


class TaskPlacementGroupRemoved(RayError):
    """The placement group the task was scheduled into was removed."""

    def __str__(self):
        return "The placement group corresponding to this task has been removed."


class ActorPlacementGroupRemoved(RayError):
    """The placement group the actor was scheduled into was removed."""

    def __str__(self):
        return "The placement group corresponding to this Actor has been removed."


class PendingCallsLimitExceeded(RayError):
    """More calls are pending on the actor than its ``max_pending_calls``."""


class TaskUnschedulableError(RayError):
    """The task can never be scheduled (e.g. its target node is dead)."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __str__(self):
        return f"The task is not schedulable: {self.error_message}"


class ActorUnschedulableError(RayError):
    """The actor can never be scheduled (e.g. its target node is dead)."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __str__(self):
        return f"The actor is not schedulable: {self.error_message}"


class ObjectRefStreamEndOfStreamError(RayError):
    """A streaming generator has no more ObjectRefs to give."""


class RayChannelError(RaySystemError):
    """A failure of a compiled graph's channels (``ray.dag``): the graph was
    torn down, or is broken because one of its actors died."""


class RayChannelTimeoutError(RayChannelError, TimeoutError):
    """A Compiled Graphs channel operation timed out."""


class RayCgraphCapacityExceeded(RaySystemError):
    """A Compiled Graph has too many executions in flight."""


RAY_EXCEPTION_TYPES = [
    PlasmaObjectNotAvailable,
    RayError,
    RayTaskError,
    WorkerCrashedError,
    RayActorError,
    ObjectStoreFullError,
    ObjectLostError,
    ObjectFetchTimedOutError,
    ReferenceCountingAssertionError,
    ObjectReconstructionFailedError,
    ObjectReconstructionFailedMaxAttemptsExceededError,
    ObjectReconstructionFailedLineageEvictedError,
    OwnerDiedError,
    GetTimeoutError,
    AsyncioActorExit,
    RuntimeEnvSetupError,
    TaskPlacementGroupRemoved,
    ActorPlacementGroupRemoved,
    PendingCallsLimitExceeded,
    LocalRayletDiedError,
    TaskUnschedulableError,
    ActorDiedError,
    ActorUnschedulableError,
    ActorUnavailableError,
    RayChannelError,
    RayChannelTimeoutError,
]
