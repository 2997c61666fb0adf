# SPDX-License-Identifier: Apache-2.0
"""ray.util: placement groups, the node's IP, and helpers vLLM imports."""

from ray._private import worker as _worker
from ray._private.services import get_node_ip_address  # noqa: F401
from ray.util.placement_group import (  # noqa: F401
    PlacementGroup,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)


def list_named_actors(all_namespaces=False):
    """The live named actors: their names in this job's namespace, or
    {"name", "namespace"} dicts for every namespace (from beamd's status)."""
    rt = _worker.runtime()
    named = [
        (a["namespace"], a["name"])
        for a in _worker.status().get("actors", [])
        if a.get("name") and a.get("state") != "DEAD"
    ]
    if all_namespaces:
        return [{"name": name, "namespace": ns} for ns, name in named]
    return [name for ns, name in named if ns == rt.namespace]


__all__ = [
    "PlacementGroup",
    "get_current_placement_group",
    "get_node_ip_address",
    "get_placement_group",
    "list_named_actors",
    "placement_group",
    "placement_group_table",
    "remove_placement_group",
]
