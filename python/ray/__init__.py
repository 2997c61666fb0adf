# SPDX-License-Identifier: Apache-2.0
"""beam's ``ray``: the slice of Ray that vLLM uses, on beamd.

``import ray`` starts nothing and contacts nothing; ``ray.init()`` connects to
this node's beamd (or starts a private one). docs/API.md lists every name
here, why it exists and what it maps to.
"""

__version__ = "2.43.0"
__commit__ = "beam"

from ray import exceptions  # noqa: E402
from ray._private.object_ref import ObjectRef  # noqa: E402
from ray._private.worker import get, init, is_initialized, put, shutdown, wait  # noqa: E402
from ray.actor import ActorClass, ActorHandle, get_actor  # noqa: E402
from ray.remote_function import RemoteFunction  # noqa: E402
from ray.runtime_context import get_runtime_context  # noqa: E402
from ray._private.ids import ActorID, JobID, NodeID, PlacementGroupID, TaskID, WorkerID  # noqa: E402
from ray import util  # noqa: E402,F401  (ray.util.* is reachable after `import ray`, as in Ray)
from ray._private import ray_option_utils as _ray_option_utils  # noqa: E402
from ray._private import state as _state  # noqa: E402
from ray._private import worker as _worker  # noqa: E402

ObjectID = ObjectRef


def remote(*args, **kwargs):
    """``@ray.remote`` / ``@ray.remote(num_gpus=1, ...)`` on a class (an actor)
    or a function (a task), or ``ray.remote(Cls)``."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _make_remote(args[0], {})
    if args or not kwargs:  # ray.remote(x, ...) or @ray.remote()
        raise AssertionError(_ray_option_utils.remote_args_error_string)  # what Ray raises
    return lambda target: _make_remote(target, kwargs)


def _make_remote(target, options):
    import inspect

    if inspect.isclass(target):
        return ActorClass(target, options)
    if callable(target):
        return RemoteFunction(target, options)
    raise TypeError("The @ray.remote decorator must be applied to either a function or a class.")


def method(*args, **kwargs):
    """``@ray.method(num_returns=...)``: accepted; beam methods return one value."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


def kill(actor, *, no_restart=True):
    """ray.kill: stop the actor's worker at once; its pending and later calls
    raise ActorDiedError. no_restart=False: an actor with restarts left
    (max_restarts) restarts instead, as when its worker dies."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). Got: {type(actor)}.")

    _worker._request("kill", {"actor": actor._ray_actor_id_bytes, "no_restart": bool(no_restart)})


def cancel(ref, *, force=False, recursive=True):
    """ray.cancel: beam runs each call to completion; cancelling is refused."""
    raise NotImplementedError("beam does not cancel tasks; use ray.kill on the actor instead")


def get_gpu_ids():
    """The GPU ids assigned to this actor (ints where they are numbers);
    [] in a driver."""
    ids = _worker.runtime().gpu_ids
    if all(str(i).isdigit() for i in ids):
        return [int(i) for i in ids]
    return list(ids)


# nodes, cluster_resources, available_resources and timeline do not start
# Ray, as in 2.43: before ray.init() they raise RaySystemError


def nodes():
    _worker.check_initialized()
    return _state.node_table()


def cluster_resources():
    _worker.check_initialized()
    return _state.cluster_resources()


def available_resources():
    _worker.check_initialized()
    return _state.available_resources()


def timeline(filename=None):
    _worker.check_initialized()
    return []


__all__ = [
    "__version__",
    "ActorClass",
    "ActorHandle",
    "ActorID",
    "JobID",
    "NodeID",
    "ObjectID",
    "ObjectRef",
    "PlacementGroupID",
    "TaskID",
    "WorkerID",
    "available_resources",
    "cancel",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "timeline",
    "wait",
]
