# SPDX-License-Identifier: Apache-2.0
"""What an actor's ``create_actor`` asks for, read from its options as Ray's
ActorClass._remote reads them: the resources it holds and those it needs to
be placed, its fit in a placement group's bundles (Ray's ValueErrors at
``.remote()``), and the worker's import path and environment variables."""

import os
import sys

from ray.util import scheduling_strategies as _ss


def resources(opts):
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


def check_pg_fit(class_name, opts, held, placement):
    """An actor placed in a placement group must fit one of its bundles: Ray
    refuses it at .remote() with a ValueError (Ray's messages)."""
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


def sys_path():
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


def env_vars(job_env, actor_env):
    env = {}
    for source in (job_env or {}, actor_env or {}):
        if hasattr(source, "to_dict"):
            source = source.to_dict()
        for k, v in (source.get("env_vars") or {}).items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("runtime_env['env_vars'] must map str to str")
            env[k] = v
    return env
