# SPDX-License-Identifier: Apache-2.0
"""The options of ``@ray.remote(...)`` and ``.options(...)``: Ray 2.43's lists,
and for each one what beam does with it.

Every option Ray 2.43 accepts is either run by beam, accepted because it
changes nothing on beam (the reason is written beside it), or refused with
``NotImplementedError`` naming the option, never silently ignored. The table
in docs/API.md is this module in prose; keep the two in step. Ray's rules on
an option's value (types, counts, lifetime, get_if_exists, ...) are not
repeated here: ``ray_option_utils`` holds them.
"""

from ray._private import utils as _utils
from ray._private.option_names import ACTOR_ONLY_OPTIONS, COMMON_OPTIONS, TASK_ONLY_OPTIONS
from ray.util import scheduling_strategies as ss
from ray.util.placement_group import PlacementGroup

ACTOR_OPTIONS = COMMON_OPTIONS + ACTOR_ONLY_OPTIONS
TASK_OPTIONS = COMMON_OPTIONS + TASK_ONLY_OPTIONS

DEFAULT_MAX_CONCURRENCY_THREADED = 1
DEFAULT_MAX_CONCURRENCY_ASYNC = 1000
# Ray's ray_constants.DEFAULT_TASK_MAX_RETRIES: a task whose worker dies runs again this often
DEFAULT_TASK_MAX_RETRIES = 3


def _refuse(what, key, value, why):
    raise NotImplementedError(
        f"beam does not implement the {what} option {key}={value!r}: {why}. "
        f"beam refuses it rather than ignore it (see docs/API.md, Options)."
    )


def _check_strategy(what, strategy):
    if strategy is None or strategy == "DEFAULT":
        return
    if isinstance(strategy, ss.PlacementGroupSchedulingStrategy):
        return
    if isinstance(strategy, ss.NodeAffinitySchedulingStrategy):
        if strategy._spill_on_unavailable or strategy._fail_on_unavailable:
            _refuse(
                what,
                "scheduling_strategy",
                "NodeAffinitySchedulingStrategy(_spill_on_unavailable/" "_fail_on_unavailable)",
                "only node_id and soft are run",
            )
        return
    if strategy == "SPREAD":
        return
    if isinstance(strategy, str):
        raise ValueError(
            f"Invalid scheduling_strategy {strategy!r}: expected 'DEFAULT', 'SPREAD', a "
            f"PlacementGroupSchedulingStrategy or a NodeAffinitySchedulingStrategy."
        )
    raise TypeError(
        f"The type of keyword 'scheduling_strategy' must be a scheduling strategy, "
        f"but received type {type(strategy)}"
    )


def _check_common(what, options):
    if options.get("accelerator_type") is not None:
        _refuse(what, "accelerator_type", options["accelerator_type"], "beam nodes advertise no accelerator types")
    if options.get("placement_group") is not None and not isinstance(options["placement_group"], str):
        if not isinstance(options["placement_group"], PlacementGroup):
            raise TypeError(
                "The type of keyword 'placement_group' must be a PlacementGroup, "
                f"but received type {type(options['placement_group'])}"
            )
    _check_strategy(what, options.get("scheduling_strategy"))
    # accepted, no effect on beam: _metadata (a note for Ray's libraries),
    # enable_task_events (Ray's task event stream, which beam does not have),
    # _labels (actor labels, shown only by Ray's state API)


def check_actor_options(options):
    """Raises for an option beam refuses; returns None. Ray's rules on the
    values are ray_option_utils's, checked before."""
    for key in options:
        if key not in ACTOR_OPTIONS:
            raise ValueError(f"Invalid option keyword {key} for actors. Valid ones are {list(ACTOR_OPTIONS)}.")
    _check_common("actor", options)
    if options.get("concurrency_groups"):
        _refuse(
            "actor",
            "concurrency_groups",
            options["concurrency_groups"],
            "use max_concurrency (one pool for all methods)",
        )
    # max_restarts, max_task_retries: run by beamd (docs/DESIGN.md, "One
    # actor's life"): a worker's death restarts the actor, and the calls it
    # had are sent again to the new one while they have retries left
    if options.get("max_pending_calls") not in (None, -1):
        _refuse(
            "actor",
            "max_pending_calls",
            options["max_pending_calls"],
            "beam does not limit a handle's pending calls (PendingCallsLimitExceeded)",
        )
    if options.get("namespace") is not None:
        _utils.validate_namespace(options["namespace"])
    # object_store_memory on an actor: deprecated in Ray, which reserves
    # nothing for it either


def check_task_options(options):
    """As check_actor_options, for remote functions."""
    for key in options:
        if key not in TASK_OPTIONS:
            raise ValueError(
                f"Invalid option keyword {key} for remote functions. " f"Valid ones are {list(TASK_OPTIONS)}."
            )
    _check_common("task", options)
    # max_calls: beam runs every task in a fresh worker process, which is
    # what any max_calls allows
    # max_retries: run (Ray's default 3): a task's worker is a one-call actor
    # that restarts that many times, its call sent again each time
    retry = options.get("retry_exceptions")
    if retry not in (None, False):
        _refuse("task", "retry_exceptions", retry, "beam does not retry a task that raised")
    n = options.get("num_returns")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        _refuse("task", "num_returns", n, "a beam task returns a fixed number of objects")
    if options.get("_generator_backpressure_num_objects") is not None:
        _refuse(
            "task",
            "_generator_backpressure_num_objects",
            options["_generator_backpressure_num_objects"],
            "beam has no generator tasks",
        )


def strategy_of(options):
    """The scheduling strategy, with the deprecated placement_group=...
    options turned into the PlacementGroupSchedulingStrategy they mean."""
    pg = options.get("placement_group", "default")
    if pg not in ("default", None) and not isinstance(pg, str):
        return ss.PlacementGroupSchedulingStrategy(
            pg, options.get("placement_group_bundle_index", -1), options.get("placement_group_capture_child_tasks")
        )
    return options.get("scheduling_strategy")
