# SPDX-License-Identifier: Apache-2.0
"""Actors: ActorClass (what ray.remote makes of a class), ActorHandle and
ActorMethod, and ``create_actor`` (remote functions, ray.remote_function,
run as one-call actors made here). Call signatures are
``_private/signature``'s, what ``create_actor`` asks for
``_private/actor_request``'s.

Creating an actor sends ``create_actor``; calling a method sends ``submit``
with a return ObjectRef made here, so ``.remote()`` never waits for beamd.

Imported in their functions, each commented: ``ray.dag`` (it imports ray) and
``_beam`` (``import ray`` works without the extension).
"""

import inspect
import os
import sys
import weakref

from ray._private import actor_request as _request
from ray._private import direct as _direct
from ray._private import ids as _ids
from ray._private import options as _opts
from ray._private import ray_option_utils
from ray._private import refcount as _refcount
from ray._private import serialization as _ser
from ray._private import signature as _signature
from ray._private import utils as _utils
from ray._private import worker as _worker
from ray._private.object_ref import ObjectRef
from ray.util import scheduling_strategies as _ss
from ray.util.placement_group import check_placement_group_index


class ActorClassInheritanceException(TypeError):
    """Raised on ``class B(A)`` where A is an actor class, as in Ray."""


# class -> (constructor signature, {method: signature}), read once per class
_SIGNATURES = weakref.WeakKeyDictionary()

# Method names every actor answers, handled by the worker itself.
BUILTIN_METHODS = ("__ray_ready__", "__ray_terminate__", "__ray_call__")

# Ray 2.43's actor options; ray/_private/options.py says what beam does with each
ACTOR_OPTIONS = frozenset(_opts.ACTOR_OPTIONS)


def check_options(options, task=False):
    if task:
        _opts.check_task_options(options)
    else:
        _opts.check_actor_options(options)
    ray_option_utils.check_together(options)
    ray_option_utils.check_resource_amounts(options)


def _method_names(cls):
    names = set(BUILTIN_METHODS)
    for name, member in inspect.getmembers(cls):
        if callable(member) and (not name.startswith("__") or name in ("__call__",)):
            names.add(name)
    return frozenset(names)


class ActorClass:
    """What ``ray.remote`` makes of a class: ``.remote(...)`` creates an actor,
    ``.options(...)`` overrides its options. It keeps the class's surface, as
    Ray's: class attributes, static and class methods read through it."""

    def __init__(self, cls, options=None, _validate=True):
        if _validate:
            ray_option_utils.validate_actor_options(options or {}, in_options=False)
        check_options(options or {})
        self.__ray_metadata__ = None
        self._cls = cls
        self._options = dict(options or {})
        self._pickled = None
        self._sigs = None
        self.__name__ = cls.__name__
        self.__qualname__ = getattr(cls, "__qualname__", cls.__name__)
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def __getattr__(self, name):
        # only reached for names the ActorClass lacks: the class's own
        if name.startswith("__") or name in ("_cls", "_options", "_pickled", "_sigs"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_cls"), name)

    def __mro_entries__(self, bases):
        """``class B(ActorCls)``: refused as Ray refuses it, once B's name is known."""
        parent, qualname = self.__name__, self.__qualname__

        def __init_subclass__(cls, **kwargs):
            raise ActorClassInheritanceException(
                f"Attempted to define subclass '{cls.__name__}' of actor class '{qualname}'. Inheriting from actor "
                f"classes is not currently supported. You can instead inherit from a non-actor base class and make "
                f"the derived class an actor class (with @ray.remote)."
            )

        return (type(f"ActorClass({parent})", (), {"__init_subclass__": classmethod(__init_subclass__)}),)

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"Actors cannot be instantiated directly. Instead of '{self.__qualname__}()', use "
            f"'{self.__qualname__}.remote()'."
        )

    def options(self, **options):
        ray_option_utils.validate_actor_options(options, in_options=True)
        merged = dict(self._options)
        merged.update(options)
        clone = ActorClass(self._cls, merged, _validate=False)
        clone._pickled = self._pickled
        clone._sigs = self._sigs
        return clone

    def remote(self, *args, **kwargs):
        return create_actor(self, args, kwargs)

    def bind(self, *args, **kwargs):
        # here, not at the top: ray.dag imports ray itself (a cycle at import time)
        from ray import dag

        dag.unsupported("ActorClass.bind()")

    def _class_data(self):
        if self._pickled is None:
            self._pickled = _ser.dumps(self._cls)[0]
        return self._pickled

    def _signatures(self):
        """(constructor signature, {method: signature}), read once per class."""
        if self._sigs is None:
            try:
                self._sigs = _SIGNATURES[self._cls]
            except (KeyError, TypeError):
                init = self._cls.__init__
                ctor = None if init is object.__init__ else _signature.signature(init, True)
                self._sigs = (ctor, _signature.method_signatures(self._cls, _method_names(self._cls), BUILTIN_METHODS))
                try:
                    _SIGNATURES[self._cls] = self._sigs
                except TypeError:
                    pass
        return self._sigs


def _has_async_methods(cls):
    """Ray's rule: a class with any async def (or async generator) method is
    an asyncio actor."""
    return any(inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m) for _, m in inspect.getmembers(cls))


def _node_id_bytes(node_id):
    """A NodeAffinitySchedulingStrategy's node_id (hex, as Ray takes it) as bytes."""
    try:
        raw = bytes.fromhex(node_id)
    except (TypeError, ValueError):
        raw = b""
    if len(raw) != 28:
        raise ValueError(
            f"NodeAffinitySchedulingStrategy: node_id must be a node's hex id (56 hex digits), " f"got {node_id!r}."
        )
    return raw


def create_actor(actor_class, args, kwargs, _task=None):
    """Creates the actor; _task names the remote function whose one-call
    worker this is (its output prefix, and beamd's ownership rule)."""
    opts = actor_class._options
    name = opts.get("name")
    if name == "":
        raise ValueError("Actor name cannot be an empty string.")
    namespace = opts.get("namespace")
    ctor_sig, method_sigs = actor_class._signatures()
    _signature.check_call(ctor_sig, args, kwargs)
    ray_option_utils.check_resources_at_submit(opts.get("resources"))
    held, placement = _request.resources(opts)
    _request.check_pg_fit(_task or actor_class.__qualname__, opts, held, placement)
    rt = _worker.runtime()
    if opts.get("get_if_exists"):
        try:
            return get_actor(name, namespace=namespace)
        except ValueError:
            try:
                return create_actor(actor_class.options(get_if_exists=False), args, kwargs)
            except ValueError:
                pass  # lost the race to create it
            return get_actor(name, namespace=namespace)
    max_concurrency = opts.get("max_concurrency")
    if max_concurrency is None:
        max_concurrency = (
            _opts.DEFAULT_MAX_CONCURRENCY_ASYNC
            if _has_async_methods(actor_class._cls)
            else _opts.DEFAULT_MAX_CONCURRENCY_THREADED
        )
    actor_id = rt.ids.actor_id()
    data, objs, actors, puts = _worker.dumps_args(args, kwargs)  # puts: held until sent
    env = _request.env_vars(rt.runtime_env, opts.get("runtime_env"))
    sys_path = _request.sys_path()
    if "PYTHONPATH" in env:
        # beamd builds the worker's PYTHONPATH from sys_path; a PYTHONPATH in
        # env_vars would replace it (and ray with it): its entries go first
        extra = [p for p in env.pop("PYTHONPATH").split(os.pathsep) if p]
        sys_path = list(dict.fromkeys(extra + sys_path))
    noset = bool(
        env.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")
        or os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")
    )
    class_name = _task or actor_class._cls.__name__
    params = {
        "actor": actor_id,
        "class_name": class_name,
        "class_data": actor_class._class_data(),
        "args": data,
        "num_cpus": float(held["CPU"]),
        "placement_cpus": float(placement["CPU"] - held["CPU"]),
        "num_gpus": float(opts.get("num_gpus") or 0),
        "memory": float(opts.get("memory") or 0),
        "resources": {k: float(v) for k, v in (opts.get("resources") or {}).items()},
        "env": env,
        "noset_cuda": noset,
        "python": sys.executable,
        "sys_path": sys_path,
        "cwd": os.getcwd(),
        "name": name or "",
        "namespace": namespace or rt.namespace,
        "job_namespace": rt.namespace,
        "detached": opts.get("lifetime") == "detached",
        "max_concurrency": int(max_concurrency),
        "max_restarts": int(opts.get("max_restarts") or 0),
        "max_task_retries": int(opts.get("max_task_retries") or 0),
        "objects": objs,
        "actors": actors,
    }
    if _task:
        params["task"] = True
    strategy = _opts.strategy_of(opts)
    if strategy == "SPREAD":
        params["spread"] = True
    elif isinstance(strategy, _ss.NodeAffinitySchedulingStrategy):
        params["node_id"] = _node_id_bytes(strategy.node_id)
        params["soft"] = bool(strategy.soft)
    elif isinstance(strategy, _ss.PlacementGroupSchedulingStrategy) and strategy.placement_group is not None:
        check_placement_group_index(strategy.placement_group, int(strategy.placement_group_bundle_index))
        params["placement_group"] = strategy.placement_group.id.binary()
        params["bundle_index"] = int(strategy.placement_group_bundle_index)
        params["capture_child_tasks"] = bool(strategy.placement_group_capture_child_tasks)
    elif strategy is None and rt.capture_child_tasks and rt.placement_group_id:
        # an actor created inside an actor that captures child tasks joins its group
        params["placement_group"] = rt.placement_group_id
        params["bundle_index"] = -1
        params["capture_child_tasks"] = True
    # here, not at the top: `import ray` works without the _beam extension
    # (scripts/scan_vllm_ray.py imports beam's ray from python/ alone)
    import _beam

    handle = ActorHandle(actor_id, class_name, _method_names(actor_class._cls), _owned=True)
    object.__setattr__(handle, "_ray_method_sigs", method_sigs)
    try:
        rt.client.request("create_actor", params)
        if (
            _direct.ON
            and rt.mode == "driver"
            and not _task
            and int(max_concurrency) == 1
            and not _has_async_methods(actor_class._cls)
            and not params["max_restarts"]
        ):
            _direct.register(actor_id)
    except _beam.RemoteError as e:
        handle._forget()
        code, message = (e.args + ("", ""))[:2]
        if code == "exists" and name:
            raise ValueError(
                f"The name {name} (namespace={namespace}) is already taken. Please use a different "
                f"name or get the existing actor using ray.get_actor('{name}', "
                f"namespace='{namespace}')"
            ) from None
        if code == "exists":
            raise ValueError(message) from None
        raise ValueError(f"beam could not create the actor: {message}") from None
    return handle


def get_actor(name, namespace=None):
    """ray.get_actor: a handle to a live named actor in namespace (None: this
    job's namespace); ValueError if none."""
    import _beam

    if not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    if namespace is not None:
        _utils.validate_namespace(namespace)
    rt = _worker.runtime()
    try:
        reply = rt.client.request("get_actor", {"name": name, "namespace": namespace or rt.namespace})
    except _beam.RemoteError as e:
        raise ValueError((e.args + ("", ""))[1]) from None
    # weak, as in Ray ("getting the actor by name acts as a weakref"): the
    # daemon counted no holder, and this handle counts none
    return ActorHandle(reply["actor"], reply["class_name"], None, _counted=False)


class ActorHandle:
    """A handle to an actor: ``handle.method.remote(...)`` calls it. Handles
    pickle, so they can be passed to other actors and processes."""

    def __init__(self, actor_id, class_name, methods, _owned=False, _counted=True):
        object.__setattr__(self, "_ray_actor_id_bytes", bytes(actor_id))
        object.__setattr__(self, "_ray_class_name", class_name)
        object.__setattr__(self, "_ray_methods", methods)
        # signatures to bind calls against (the creator's handle only)
        object.__setattr__(self, "_ray_method_sigs", None)
        # an uncounted handle (an actor's handle to itself) holds nothing
        epoch = _refcount.acquire(1, bytes(actor_id), owned=_owned) if _counted else -1
        object.__setattr__(self, "_ray_epoch", epoch)

    def _forget(self):
        """Undo the local count of a handle whose actor was never created."""
        epoch = object.__getattribute__(self, "_ray_epoch")
        object.__setattr__(self, "_ray_epoch", -1)
        _refcount.release(1, self._ray_actor_id_bytes, epoch)

    def __del__(self):
        try:
            epoch = object.__getattribute__(self, "_ray_epoch")
            if epoch >= 0:
                _refcount.release(1, self._ray_actor_id_bytes, epoch)
        except Exception:
            pass

    @property
    def _actor_id(self):
        return _ids.ActorID(self._ray_actor_id_bytes)

    def __getattr__(self, name):
        if name.startswith("_ray_") or (name.startswith("__") and name not in BUILTIN_METHODS):
            raise AttributeError(name)
        methods = object.__getattribute__(self, "_ray_methods")
        if methods is None:
            return ActorMethod(self, name)
        if name not in methods:
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
        # kept as an attribute, as Ray's handle keeps its methods: the next
        # handle.method is a plain lookup (the method holds the handle weakly)
        method = ActorMethod(self, name)
        object.__setattr__(self, name, method)
        return method

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._ray_actor_id_bytes == self._ray_actor_id_bytes

    def __hash__(self):
        return hash(self._ray_actor_id_bytes)

    def __repr__(self):
        return f"Actor({self._ray_class_name}, {self._ray_actor_id_bytes.hex()})"

    def __reduce__(self):
        _refcount.note_contained(1, self._ray_actor_id_bytes)
        return (_deserialize_actor_handle, (self._ray_actor_id_bytes, self._ray_class_name, self._ray_methods))


def _deserialize_actor_handle(actor_id, class_name, methods):
    return ActorHandle(actor_id, class_name, methods)


def _method_from_pickle(handle, name, num_returns):
    return ActorMethod(handle, name, num_returns, _hard=True)


class ActorMethod:
    """``handle.method``: ``.remote(*args, **kwargs)`` returns an ObjectRef.
    As Ray's, it holds its handle weakly (a method alone keeps no actor
    alive; once the handle is gone, .remote() raises "Lost reference to
    actor"); one unpickled elsewhere (passed into a task) holds it."""

    def __init__(self, handle, name, num_returns=1, _hard=False):
        self._handle_ref = weakref.ref(handle)
        self._hard = handle if _hard else None
        self._name = name
        self._num_returns = num_returns
        self._direct_ok = _direct.eligible(name, num_returns)  # its calls may go direct (no refs in args)

    @property
    def _handle(self):
        handle = self._hard or self._handle_ref()
        if handle is None:
            raise RuntimeError("Lost reference to actor")
        return handle

    def __reduce__(self):
        return (_method_from_pickle, (self._handle, self._name, self._num_returns))

    def options(self, **options):
        n = options.get("num_returns", 1)
        return ActorMethod(self._handle, self._name, n, _hard=self._hard is not None)

    def remote(self, *args, **kwargs):
        handle = self._hard or self._handle_ref()
        if handle is None:
            raise RuntimeError("Lost reference to actor")
        sigs = handle._ray_method_sigs
        if sigs is not None:
            _signature.check_call(sigs.get(self._name), args, kwargs)
        rt = _worker._runtime or _worker.runtime()  # (runtime() initialises one: the first call only)
        data, objs, actors, puts = _worker.dumps_args(args, kwargs)  # puts: held until sent
        oid = rt.ids.object_id()
        if _direct.ON and rt.mode == "driver":
            ok = self._direct_ok and not objs and not actors  # the rule allows this call
            try:
                ref = _direct.submit(rt, handle._ray_actor_id_bytes, ok, self._name, data, oid, ObjectRef)
            except ConnectionError as e:
                raise _worker._lost_connection(e) from None
            if ref is not None:
                return ref
        # submit sets push: beamd then sends the result here when it is
        # ready, so ray.get of this ref needs no round trip (worker.get)
        params = _ser.with_refs(
            {"actor": handle._ray_actor_id_bytes, "obj": oid, "method": self._name, "args": data}, objs, actors
        )
        ref = ObjectRef(oid, _owned=True)
        try:
            rt.client.submit(params)
        except ConnectionError as e:
            raise _worker._lost_connection(e) from None
        if _direct.ON:
            _direct.note_beamd(handle._ray_actor_id_bytes, oid)
        return ref

    def bind(self, *args, **kwargs):
        """A compiled-graph node for one call of this method (ray.dag)."""
        # here, not at the top: ray.dag imports ray itself (a cycle at import time)
        from ray.dag import dag_node

        return dag_node.bind_method(self, args, kwargs)

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"Actor methods cannot be called directly. Instead of running 'object.{self._name}()', try "
            f"'object.{self._name}.remote()'."
        )
