# SPDX-License-Identifier: Apache-2.0
"""Remote functions (Ray's ``ray.remote_function``): what ``ray.remote``
makes of a function. Each call runs in a one-call actor (``_TaskRunner``),
so a task is an actor that ends after its call, retried by that actor's
restarts (``max_retries``)."""

import inspect

from ray import actor as _actor
from ray._private import options as _opts
from ray._private import ray_option_utils
from ray._private import signature as _signature

# task options an actor has too, but that mean something else for a task (a
# name only labels it; the others are the task's own, read here)
_TASK_ONLY = ("name", "num_returns", "max_retries", "retry_exceptions", "max_calls")


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
        _actor.check_options(options or {}, task=True)
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
            self._sig = _signature.signature(self._function, False)
        _signature.check_call(self._sig, args, kwargs)
        ray_option_utils.check_resources_at_submit(self._options.get("resources"))
        opts = {k: v for k, v in self._options.items() if k in _actor.ACTOR_OPTIONS and k not in _TASK_ONLY}
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
            self._runner = _actor.ActorClass(_TaskRunner, opts, _validate=False)
        handle = _actor.create_actor(self._runner, (), {}, _task=self.__name__)
        if isinstance(n, int) and n > 1:
            first = handle.run_many.remote(self._function, n, *args, **kwargs)
            refs = [first] + [handle.pick.remote(i) for i in range(1, n)]
        else:
            refs = handle.run.remote(self._function, *args, **kwargs)
            if n == 0:
                refs = None
        del handle  # the worker ends once its calls are done
        return refs
