# SPDX-License-Identifier: Apache-2.0
"""Scheduling strategies passed as ``scheduling_strategy=`` to ray.remote."""


class PlacementGroupSchedulingStrategy:
    """Place the actor in a bundle of a placement group (index -1: any bundle
    with room); it is charged against the bundle, not the node's free pool."""

    def __init__(self, placement_group, placement_group_bundle_index=-1, placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


class NodeAffinitySchedulingStrategy:
    """Place the actor on the node with this hex id, as Ray's node affinity
    policy: while the node is alive and could ever fit the actor it waits
    there for room (soft or not); when it is gone or too small, soft places
    it anywhere, hard fails it (ActorUnschedulableError). The underscored
    flags are refused when set (ray/_private/options.py)."""

    def __init__(self, node_id, soft, _spill_on_unavailable=False, _fail_on_unavailable=False):
        if not isinstance(node_id, str):
            node_id = node_id.hex()  # a NodeID, as Ray allows
        self.node_id = node_id
        self.soft = soft
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable


DEFAULT_SCHEDULING_STRATEGY = "DEFAULT"
SPREAD_SCHEDULING_STRATEGY = "SPREAD"
