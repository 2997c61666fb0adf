# SPDX-License-Identifier: Apache-2.0
"""Checks of ``@ray.remote(...)`` and ``.options(...)`` arguments, with Ray's
messages (after Ray's python/ray/_private/ray_option_utils.py, Apache-2.0):
the keywords each kind accepts, their types and values, and the resource
dict's reserved names. Raised where Ray raises them: in the decorator or in
``.options()``; ``check_together`` (the rules across options) again on the
options merged from both; ``check_resources_at_submit`` at ``.remote()``.
Every rule on an option's value lives here, and only here;
``check_resource_amounts`` adds beam's own on resource amounts. Which options beam runs, accepts or refuses is
``ray._private.options``.

Keywords newer Ray versions added (label_selector, fallback_strategy,
allow_out_of_order_execution, enable_tensor_transport) are not Ray 2.43's:
they are refused as invalid keywords, as Ray 2.43 refuses them. What beam
does with each option is listed in docs/API.md.
"""

RESOURCE_UNIT_SCALING = 10000
ACCELERATOR_NAMES = ("GPU", "TPU", "neuron_cores", "HPU", "NPU")


def _not_whole(resource, quantity):
    """The one rule on fractions: a quantity above 1 must be whole (Ray's, for
    accelerators; beam's, for custom resources too)."""
    if quantity > 1 and not float(quantity).is_integer():
        return f"{resource} resource quantities >1 must be whole numbers. The specified quantity {quantity} is invalid."
    return None


def _resource_quantity(name, quantity):
    if quantity < 0:
        return f"The quantity of resource {name} cannot be negative"
    if isinstance(quantity, float) and quantity != 0.0 and int(quantity * RESOURCE_UNIT_SCALING) == 0:
        return f"The precision of the fractional quantity of resource {name} cannot go beyond 0.0001"
    resource = "GPU" if name == "num_gpus" else name
    if resource in ACCELERATOR_NAMES:
        return _not_whole(resource, quantity)
    return None


def _resources(value):
    if value is None:
        return None
    if "CPU" in value or "GPU" in value:
        return "Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' in 'resources' keyword"
    for name, quantity in value.items():
        msg = _resource_quantity(name, quantity)
        if msg:
            return msg
    return None


_COUNTS = set()  # the options _counting checks: an int, never a bool


def _counting(name, infinite=True):
    _COUNTS.add(name)
    if infinite:
        return (
            (int, type(None)),
            lambda x: None
            if x is None or x >= -1
            else f"The keyword '{name}' only accepts None, 0, -1 or a positive integer, where -1 represents infinity.",
        )
    return (
        (int, type(None)),
        lambda x: None if x is None or x >= 0 else f"The keyword '{name}' only accepts None, 0 or a positive integer.",
    )


def _resource(name):
    return ((float, int, type(None)), lambda x: None if x is None else _resource_quantity(name, x))


def _num_returns(x):
    if x is None or x in ("dynamic", "streaming") or (isinstance(x, int) and x >= 0):
        return None
    return (
        "The keyword 'num_returns' only accepts None, a non-negative integer, 'streaming' (for generators), "
        "or 'dynamic'."
    )


def _max_concurrency(x):
    # Ray's count rule, and beam's: at least one call runs at a time
    return _counting("max_concurrency", False)[1](x) or ("max_concurrency must be at least 1." if x == 0 else None)


def _lifetime(x):
    if x in (None, "detached", "non_detached"):
        return None
    return "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."


_ANY = (None, None)

_COMMON = {
    "accelerator_type": ((str, type(None)), None),
    "memory": _resource("memory"),
    "name": ((str, type(None)), None),
    "num_cpus": _resource("num_cpus"),
    "num_gpus": _resource("num_gpus"),
    "object_store_memory": _counting("object_store_memory", False),
    "placement_group": _ANY,
    "placement_group_bundle_index": (int, None),
    "placement_group_capture_child_tasks": ((bool, type(None)), None),
    "resources": ((dict, type(None)), _resources),
    "runtime_env": _ANY,  # a dict or a RuntimeEnv (a dict in Ray)
    "scheduling_strategy": _ANY,
    "_metadata": ((dict, type(None)), None),
    "enable_task_events": (bool, None),
    "_labels": ((dict, type(None)), None),
}

_TASK_ONLY = {
    "max_calls": _counting("max_calls", False),
    "max_retries": _counting("max_retries"),
    "num_returns": ((int, str, type(None)), _num_returns),
    "object_store_memory": (
        (int, type(None)),
        lambda x: None if x is None else "Setting 'object_store_memory' is not implemented for tasks",
    ),
    "retry_exceptions": _ANY,
    "_generator_backpressure_num_objects": _ANY,
}

_ACTOR_ONLY = {
    "concurrency_groups": ((list, dict, type(None)), None),
    "lifetime": ((str, type(None)), _lifetime),
    "max_concurrency": (_counting("max_concurrency", False)[0], _max_concurrency),
    "max_restarts": _counting("max_restarts"),
    "max_task_retries": _counting("max_task_retries"),
    "max_pending_calls": _counting("max_pending_calls"),
    "namespace": ((str, type(None)), None),
    "get_if_exists": (bool, None),
}

task_options = {**_COMMON, **_TASK_ONLY}
actor_options = {**_COMMON, **_ACTOR_ONLY}
valid_options = {**_TASK_ONLY, **_ACTOR_ONLY, **_COMMON}

remote_args_error_string = (
    "The @ray.remote decorator must be applied either with no arguments and no parentheses, for example "
    "'@ray.remote', or it must be applied using some of the arguments in the list "
    f"{list(valid_options)}, for example '@ray.remote(num_returns=2, resources={{\"CustomResource\": 1}})'."
)


def _validate(table, kind, options):
    for key, value in options.items():
        if key not in table:
            raise ValueError(f"Invalid option keyword {key} for {kind}. Valid ones are {list(table)}.")
        types, check = table[key]
        if types is not None and (not isinstance(value, types) or (key in _COUNTS and isinstance(value, bool))):
            raise TypeError(f"The type of keyword '{key}' must be {types}, but received type {type(value)}")
        if check is not None:
            msg = check(value)
            if msg:
                raise ValueError(msg)
    check_together(options)


def check_together(options):
    """The rules across options, on one call's and again on the options
    merged from the decorator and ``.options()``."""
    strategy = options.get("scheduling_strategy")
    if options.get("placement_group", "default") not in ("default", None) and strategy is not None:
        raise ValueError(
            "Placement groups should be specified via the scheduling_strategy option. "
            "The placement_group option is deprecated."
        )
    if options.get("get_if_exists") and not options.get("name"):
        raise ValueError("The actor name must be specified to use `get_if_exists`.")


def validate_task_options(options, in_options):
    _validate(task_options, "remote functions", options)
    if in_options and "max_calls" in options:
        raise ValueError("Setting 'max_calls' is not supported in '.options()'.")


def validate_actor_options(options, in_options):
    _validate(actor_options, "actors", options)
    if in_options and "concurrency_groups" in options:
        raise ValueError("Setting 'concurrency_groups' is not supported in '.options()'.")


def check_resources_at_submit(resources):
    """What Ray checks of ``resources=`` when the task or actor is submitted."""
    if not resources:
        return
    if "memory" in resources or "object_store_memory" in resources:
        raise ValueError("The resources dictionary must not contain the key 'memory' or 'object_store_memory'")
    if "bundle" in resources:
        raise ValueError(
            f"The resource should not include `bundle` which is reserved for Ray. resources: " f"{resources}"
        )


def check_resource_amounts(options):
    """beam's rules on the amounts a task or actor asks for, beyond Ray's
    (checked on the options merged from the decorator and ``.options()``):
    num_cpus/num_gpus/memory plain non-negative numbers, and every custom
    resource a non-negative number, whole above 1."""
    for key in ("num_cpus", "num_gpus", "memory"):
        value = options.get(key)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"The resource {key} must be a non-negative number, got {value!r}.")
    msg = _not_whole("GPU", options.get("num_gpus") or 0)
    if msg:
        raise ValueError(msg)
    res = options.get("resources") or {}
    if not isinstance(res, dict):
        raise TypeError("resources must be a dict of resource name to amount")
    for name, amount in res.items():
        if name in ("CPU", "GPU"):
            raise ValueError(f"Use the 'num_{name.lower()}s' argument to request {name}, not 'resources'.")
        if not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(f"Resource {name} must be a non-negative number, got {amount!r}.")
        msg = _not_whole(name, amount)
        if msg:
            raise ValueError(msg)
