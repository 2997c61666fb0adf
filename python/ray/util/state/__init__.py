# SPDX-License-Identifier: Apache-2.0
"""ray.util.state: list_nodes (and list_actors), as objects with attributes."""

from dataclasses import dataclass, field

from ray._private import state
from ray._private import worker as _worker


@dataclass
class NodeState:
    node_id: str
    node_ip: str
    is_head_node: bool
    state: str
    state_message: str = ""
    node_name: str = ""
    resources_total: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    start_time_ms: int = 0
    end_time_ms: int = 0


@dataclass
class ActorState:
    actor_id: str
    class_name: str
    state: str
    name: str = ""
    pid: int = 0
    node_id: str = ""
    num_restarts: int = 0


def list_nodes(
    address=None, filters=None, limit=100, timeout=30, detail=False, raise_on_missing_output=True, _explain=False
):
    out = []
    for n in state.node_table():
        out.append(
            NodeState(
                node_id=n["NodeID"],
                node_ip=n["NodeManagerAddress"],
                is_head_node=n["IsHeadNode"],
                state="ALIVE" if n["Alive"] else "DEAD",
                state_message=n["DeathReasonMessage"],
                node_name=n["NodeName"],
                resources_total=dict(n["Resources"]),
                labels=dict(n["Labels"]),
            )
        )
    return _filter(out, filters)[:limit]


def list_actors(
    address=None, filters=None, limit=100, timeout=30, detail=False, raise_on_missing_output=True, _explain=False
):
    st = _worker.status()
    out = [
        ActorState(
            actor_id=a["actor_id"],
            class_name=a["class_name"],
            state=a["state"],
            name=a["name"],
            pid=a["pid"],
            node_id=a["node_id"],
            num_restarts=a.get("num_restarts", 0),
        )
        for a in st.get("actors", [])
    ]
    return _filter(out, filters)[:limit]


def _filter(items, filters):
    for key, op, value in filters or []:
        if op == "=":
            items = [i for i in items if str(getattr(i, key)) == str(value)]
        elif op == "!=":
            items = [i for i in items if str(getattr(i, key)) != str(value)]
        else:
            raise ValueError(f"Unsupported filter predicate {op!r}")
    return items
