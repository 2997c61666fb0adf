# SPDX-License-Identifier: Apache-2.0
"""Placement groups through Ray's public API (beam's ray or real Ray,
imported when called): the ray.util.placement_group module, and the
scheduling strategy that puts a task or actor in one bundle."""

import importlib


def pg_api():
    """The module ray.util.placement_group: the attribute of that name is
    the function (as in Ray), so the module is reached through importlib."""
    return importlib.import_module("ray.util.placement_group")


def pg_strategy(pg, index=-1):
    """PlacementGroupSchedulingStrategy for bundle index of pg (-1: any)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)
