# SPDX-License-Identifier: Apache-2.0
"""ray.util: placement groups, the node's IP, and helpers vLLM imports."""

from ray.util.placement_group import (  # noqa: F401
    PlacementGroup,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)


def get_node_ip_address(address="8.8.8.8:53"):
    """This node's IP: the one its beamd uses (so it matches ``node:<ip>``
    and ``NodeManagerAddress``); before ray.init, the default route's."""
    import os

    from ray._private import worker as _worker

    if _worker.is_initialized():
        return _worker.runtime().node_ip
    env = os.environ.get("BEAM_NODE_IP")
    if env:
        return env
    return _default_route_ip()


def _default_route_ip():
    """The source address of the default route, read from the kernel's
    tables (no packet is sent); 127.0.0.1 when there is none."""
    import socket

    try:
        with open("/proc/net/route") as f:
            next(f)
            iface = next((p[0] for p in (line.split() for line in f) if p[1] == "00000000"), None)
        if iface:
            import fcntl
            import struct

            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", iface.encode()[:15]))  # SIOCGIFADDR
                return socket.inet_ntoa(packed[20:24])
            finally:
                s.close()
    except (OSError, StopIteration):
        pass
    return "127.0.0.1"


def list_named_actors(all_namespaces=False):
    """The live named actors: their names in this job's namespace, or
    {"name", "namespace"} dicts for every namespace (from beamd's status)."""
    from ray._private import worker as _worker

    rt = _worker.runtime()
    named = [(a["namespace"], a["name"]) for a in _worker.status().get("actors", [])
             if a.get("name") and a.get("state") != "DEAD"]
    if all_namespaces:
        return [{"name": name, "namespace": ns} for ns, name in named]
    return [name for ns, name in named if ns == rt.namespace]


__all__ = [
    "PlacementGroup", "get_current_placement_group", "get_node_ip_address", "get_placement_group",
    "list_named_actors", "placement_group", "placement_group_table", "remove_placement_group",
]
