# SPDX-License-Identifier: Apache-2.0
"""Actors: ActorClass (what ray.remote makes of a class), ActorHandle and
ActorMethod, and remote functions run as one-call actors.

Creating an actor sends ``create_actor``; calling a method sends ``submit``
with a return ObjectRef made here, so ``.remote()`` never waits for beamd.
"""

import collections
import inspect
import os
import sys
import weakref

from ray._private import ids as _ids
from ray._private import options as _opts
from ray._private import ray_option_utils
from ray._private import refcount as _refcount
from ray._private import serialization as _ser
from ray._private import utils as _utils
from ray._private import worker as _worker
from ray._private.object_ref import ObjectRef


class ActorClassInheritanceException(TypeError):
    """Raised on ``class B(A)`` where A is an actor class, as in Ray."""


# class -> (constructor signature, {method: signature}), read once per class
_SIGNATURES = weakref.WeakKeyDictionary()

# Method names every actor answers, handled by the worker itself.
BUILTIN_METHODS = ("__ray_ready__", "__ray_terminate__", "__ray_call__")

# Ray 2.43's actor options; ray/_private/options.py says what beam does with each
_ACTOR_OPTIONS = frozenset(_opts.ACTOR_OPTIONS)


def _check_options(options, task=False):
    if task:
        _opts.check_task_options(options)
    else:
        _opts.check_actor_options(options)
    ray_option_utils.check_resource_amounts(options)


def _method_names(cls):
    names = set(BUILTIN_METHODS)
    for name, member in inspect.getmembers(cls):
        if callable(member) and (not name.startswith("__") or name in ("__call__",)):
            names.add(name)
    return frozenset(names)


class _CallSig(collections.namedtuple("_CallSig", "sig lo hi")):
    """A signature for binding a call's arguments, with its positional
    arity read once: lo..hi positional arguments alone fit (hi may be inf);
    lo is None where keyword-only parameters without a default need
    sig.bind anyway."""


def _arity(sig):
    lo = hi = 0
    for p in sig.parameters.values():
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            hi += 1
            if p.default is inspect.Parameter.empty:
                lo = hi
        elif p.kind is inspect.Parameter.VAR_POSITIONAL:
            hi = float("inf")
        elif p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty:
            return None, None
    return lo, hi


def _signature(fn, drop_first):
    """fn's signature for binding a call's arguments (without self/cls when
    drop_first), as a _CallSig, or None where it cannot be read."""
    try:
        sig = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if (
        drop_first
        and params
        and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ):
        sig = sig.replace(parameters=params[1:])
    return _CallSig(sig, *_arity(sig))


def _method_signatures(cls, names):
    """name -> signature of each method as it is called through a handle."""
    sigs = {}
    for name in names:
        if name in BUILTIN_METHODS:
            continue
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if isinstance(attr, staticmethod):
            sig = _signature(attr.__func__, False)
        elif isinstance(attr, classmethod):
            sig = _signature(attr.__func__, True)
        elif inspect.isfunction(attr):
            sig = _signature(attr, True)
        else:
            sig = None
        if sig is not None:
            sigs[name] = sig
    return sigs


def _bind(sig, args, kwargs):
    """Raises the TypeError Ray raises at .remote() for arguments that do
    not fit the signature. Positional arguments alone fit when their count
    does (what sig.bind would find, without its cost on every call)."""
    if sig is None:
        return
    if not kwargs and sig.lo is not None and sig.lo <= len(args) <= sig.hi:
        return
    sig.sig.bind(*args, **kwargs)


def _actor_resources(opts):
    """(what the actor holds, what must be free to place it), as Ray's
    ActorClass._remote: an actor that names no resource holds none and needs
    1 CPU free to be placed; one that names any holds 1 CPU unless num_cpus
    says otherwise."""
    res = dict(opts.get("resources") or {})
    for key, name in (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory")):
        if opts.get(key) is not None:
            res[name] = opts[key]
    if opts.get("accelerator_type") is not None:
        res[f"accelerator_type:{opts['accelerator_type']}"] = 0.001
    if not set(res) - {"memory", "object_store_memory"}:
        res.setdefault("CPU", 0)
        placement = dict(res)
        placement["CPU"] += 1
        return res, placement
    res.setdefault("CPU", 1)
    return res, res


def _fits_a_bundle(request, bundles):
    return any(all(b.get(k, 0) >= v for k, v in request.items() if k != "bundle") for b in bundles)


def _check_pg_fit(class_name, opts, held, placement):
    """An actor placed in a placement group must fit one of its bundles: Ray
    refuses it at .remote() with a ValueError (Ray's messages)."""
    from ray.util import scheduling_strategies as _ss

    strategy = opts.get("scheduling_strategy")
    if not isinstance(strategy, _ss.PlacementGroupSchedulingStrategy) or strategy.placement_group is None:
        return
    bundles = strategy.placement_group.bundle_specs
    if not _fits_a_bundle(held, bundles):
        raise ValueError(
            f"Cannot schedule {class_name} with the placement group because the resource request {held} cannot "
            f"fit into any bundles for the placement group, {bundles}."
        )
    if not _fits_a_bundle(placement, bundles):
        raise ValueError(
            f"Cannot schedule {class_name} with the placement group because the actor requires "
            f"{placement.get('CPU', 0)} CPU for creation, but it cannot fit into any bundles for the placement "
            f"group, {bundles}. Consider creating a placement group with CPU resources."
        )


def _sys_path():
    """The driver's import path for its workers: '' becomes the cwd, and the
    main script's folder comes first, as it does for the driver."""
    cwd = os.getcwd()
    paths = []
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    # only a script's folder: a module run with -m (ray._worker in an actor,
    # `python -m pkg.app`) has the cwd as sys.path[0], never its own folder,
    # and ray/ itself on the path would shadow the stdlib's types module
    if main_file and getattr(main, "__spec__", None) is None:
        paths.append(os.path.dirname(os.path.abspath(main_file)))
    for p in sys.path:
        paths.append(os.path.abspath(p) if p else cwd)
    return list(dict.fromkeys(paths))


def _env_vars(job_env, actor_env):
    env = {}
    for source in (job_env or {}, actor_env or {}):
        if hasattr(source, "to_dict"):
            source = source.to_dict()
        for k, v in (source.get("env_vars") or {}).items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("runtime_env['env_vars'] must map str to str")
            env[k] = v
    return env


class ActorClass:
    """What ``ray.remote`` makes of a class: ``.remote(...)`` creates an actor,
    ``.options(...)`` overrides its options. It keeps the class's surface, as
    Ray's: class attributes, static and class methods read through it."""

    def __init__(self, cls, options=None, _validate=True):
        if _validate:
            ray_option_utils.validate_actor_options(options or {}, in_options=False)
        _check_options(options or {})
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
        return _create_actor(self, args, kwargs)

    def bind(self, *args, **kwargs):
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
                ctor = None if init is object.__init__ else _signature(init, True)
                self._sigs = (ctor, _method_signatures(self._cls, _method_names(self._cls)))
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


def _create_actor(actor_class, args, kwargs, _task=None):
    """Creates the actor; _task names the remote function whose one-call
    worker this is (its output prefix, and beamd's ownership rule)."""
    from ray.util import scheduling_strategies as _ss

    opts = actor_class._options
    name = opts.get("name")
    if name == "":
        raise ValueError("Actor name cannot be an empty string.")
    namespace = opts.get("namespace")
    ctor_sig, method_sigs = actor_class._signatures()
    _bind(ctor_sig, args, kwargs)
    ray_option_utils.check_resources_at_submit(opts.get("resources"))
    held, placement = _actor_resources(opts)
    _check_pg_fit(_task or actor_class.__qualname__, opts, held, placement)
    rt = _worker.runtime()
    if opts.get("get_if_exists"):
        try:
            return get_actor(name, namespace=namespace)
        except ValueError:
            try:
                return _create_actor(actor_class.options(get_if_exists=False), args, kwargs)
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
    data, objs, actors = _worker.dumps_args(args, kwargs)
    env = _env_vars(rt.runtime_env, opts.get("runtime_env"))
    sys_path = _sys_path()
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
        from ray.util.placement_group import check_placement_group_index

        check_placement_group_index(strategy.placement_group, int(strategy.placement_group_bundle_index))
        params["placement_group"] = strategy.placement_group.id.binary()
        params["bundle_index"] = int(strategy.placement_group_bundle_index)
        params["capture_child_tasks"] = bool(strategy.placement_group_capture_child_tasks)
    elif strategy is None and rt.capture_child_tasks and rt.placement_group_id:
        # an actor created inside an actor that captures child tasks joins its group
        params["placement_group"] = rt.placement_group_id
        params["bundle_index"] = -1
        params["capture_child_tasks"] = True
    import _beam

    handle = ActorHandle(actor_id, class_name, _method_names(actor_class._cls), _owned=True)
    object.__setattr__(handle, "_ray_method_sigs", method_sigs)
    try:
        rt.client.request("create_actor", params)
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
        if methods is not None and name not in methods:
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
        return ActorMethod(self, name)

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
            _bind(sigs.get(self._name), args, kwargs)
        rt = _worker.runtime()
        data, objs, actors = _worker.dumps_args(args, kwargs)
        oid = rt.ids.object_id()
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
        return ref

    def bind(self, *args, **kwargs):
        """A compiled-graph node for one call of this method (ray.dag)."""
        from ray.dag import dag_node

        return dag_node.bind_method(self, args, kwargs)

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"Actor methods cannot be called directly. Instead of running 'object.{self._name}()', try "
            f"'object.{self._name}.remote()'."
        )


class _TaskRunner:
    """The one-call actor a remote function runs in. Its arguments are the
    task's own, so the worker resolves top-level ObjectRefs as Ray does."""

    def run(self, fn, /, *args, **kwargs):
        return fn(*args, **kwargs)

    def run_many(self, fn, n, /, *args, **kwargs):
        """num_returns=n > 1: runs fn and keeps its n values for pick()."""
        self._values, self._error = None, None
        try:
            values = fn(*args, **kwargs)
            values = list(values) if isinstance(values, (tuple, list)) else values
            if not isinstance(values, list) or len(values) != n:
                got = len(values) if isinstance(values, list) else 1
                raise ValueError(f"Task returned {got} objects, but num_returns={n}.")
        except Exception as e:
            self._error = e
            raise
        self._values = values
        return values[0]

    def pick(self, i):
        if self._error is not None:
            raise self._error
        return self._values[i]


class RemoteFunction:
    """What ``ray.remote`` makes of a function: each ``.remote()`` runs it in
    a fresh worker process (an actor that ends after its one call, printing
    as ``(f pid=N)``). While it waits in ray.get/ray.wait its CPU is lent
    back (ray._worker says so to beamd), and what it creates outlives it
    while handles do (beamd hands it to the task's owner)."""

    def __init__(self, fn, options=None, _validate=True):
        if inspect.iscoroutinefunction(fn):
            raise ValueError(
                "'async def' should not be used for remote tasks. You can wrap the async function with "
                "`asyncio.run(f())`. See more at:https://docs.ray.io/en/latest/ray-core/actors/async_api.html "
            )
        if _validate:
            ray_option_utils.validate_task_options(options or {}, in_options=False)
        _check_options(options or {}, task=True)
        self._function = fn
        self._options = dict(options or {})
        self._runner = None  # the ActorClass its calls run in
        self._sig = False
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        name = f"{self._function.__module__}.{self.__name__}"
        raise TypeError(
            f"Remote functions cannot be called directly. Instead of running '{name}()', try " f"'{name}.remote()'."
        )

    def options(self, **options):
        ray_option_utils.validate_task_options(options, in_options=True)
        merged = dict(self._options)
        merged.update(options)
        clone = RemoteFunction(self._function, merged, _validate=False)
        clone._sig = self._sig
        return clone

    def remote(self, *args, **kwargs):
        # the task options beam accepts have no actor counterpart to pass on
        # (a task's name only labels it in Ray's dashboard: no named actor)
        if self._sig is False:
            self._sig = _signature(self._function, False)
        _bind(self._sig, args, kwargs)
        ray_option_utils.check_resources_at_submit(self._options.get("resources"))
        opts = {
            k: v
            for k, v in self._options.items()
            if k in _ACTOR_OPTIONS and k not in ("name", "num_returns", "max_retries", "retry_exceptions", "max_calls")
        }
        if opts.get("num_cpus") is None:
            opts["num_cpus"] = 1
        # a task whose worker dies runs again on a new one, max_retries times
        # (Ray's default 3): its one-call actor restarts and resends its call
        retries = self._options.get("max_retries")
        retries = _opts.DEFAULT_TASK_MAX_RETRIES if retries is None else retries
        opts["max_restarts"] = opts["max_task_retries"] = retries
        n = self._options.get("num_returns")
        n = 1 if n is None else n
        if self._runner is None:
            self._runner = ActorClass(_TaskRunner, opts, _validate=False)
        handle = _create_actor(self._runner, (), {}, _task=self.__name__)
        if isinstance(n, int) and n > 1:
            first = handle.run_many.remote(self._function, n, *args, **kwargs)
            refs = [first] + [handle.pick.remote(i) for i in range(1, n)]
        else:
            refs = handle.run.remote(self._function, *args, **kwargs)
            if n == 0:
                refs = None
        del handle  # the worker ends once its calls are done
        return refs
