# SPDX-License-Identifier: Apache-2.0
"""Cluster state as Ray's tables: nodes, resources per node and in total.

Every function asks the daemon (op ``status``) and shapes the answer as Ray
2.43 does; node ids are the same 56-hex-char ids as everywhere else.
"""

from ray._private import worker as _worker


def _status():
    return _worker.status()


def _nodes(st):
    """The daemon's node list: a cluster's when it has one, else itself."""
    return st.get("nodes") or [st]


def node_table():
    st = _status()
    out = []
    for n in _nodes(st):
        alive = bool(n.get("alive", True))
        out.append(
            {
                "NodeID": n["node_id"],
                "Alive": alive,
                "NodeManagerAddress": n["node_ip"],
                "NodeManagerHostname": n.get("hostname", ""),
                "NodeManagerPort": 0,
                "ObjectManagerPort": 0,
                "ObjectStoreSocketName": n.get("socket", ""),
                "RayletSocketName": n.get("socket", ""),
                "MetricsExportPort": 0,
                "NodeName": n["node_ip"],
                "RuntimeEnvAgentPort": 0,
                "DashboardAgentListenPort": 0,
                "MetricsAgentPort": 0,
                "alive": alive,
                "Resources": dict(n["resources_total"]) if alive else {},
                "Labels": {"ray.io/node_id": n["node_id"]},
                "IsHeadNode": bool(n.get("is_head")),
                "DeathReason": 0 if alive else 2,
                "DeathReasonMessage": "" if alive else n.get("death", "the node stopped answering"),
            }
        )
    return out


def _sum(per_node):
    total = {}
    for res in per_node.values():
        for k, v in res.items():
            total[k] = total.get(k, 0.0) + v
    return total


def total_resources_per_node():
    st = _status()
    return {n["node_id"]: dict(n["resources_total"]) for n in _nodes(st) if n.get("alive", True)}


def available_resources_per_node():
    st = _status()
    return {
        n["node_id"]: {k: v for k, v in n["resources_available"].items()} for n in _nodes(st) if n.get("alive", True)
    }


def cluster_resources():
    return _sum(total_resources_per_node())


def available_resources():
    return {k: v for k, v in _sum(available_resources_per_node()).items() if v > 0}
