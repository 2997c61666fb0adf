# SPDX-License-Identifier: Apache-2.0
"""Placement groups: gang reservations of resource bundles, placed by
strategy, atomically (all bundles or none). Ops: ``pg_create``,
``pg_remove``, ``pg_table``; ``ready()`` is an object the daemon completes
when the group is placed."""

from ray import exceptions
from ray._private import ids as _ids
from ray._private import serialization as _ser
from ray._private import worker as _worker
from ray._private.object_ref import ObjectRef

VALID_PLACEMENT_GROUP_STRATEGIES = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}


class PlacementGroup:
    """A handle to a placement group; picklable, usable from any process."""

    def __init__(self, id, bundle_cache=None):
        if isinstance(id, (bytes, bytearray)):
            id = _ids.PlacementGroupID(bytes(id))
        self.id = id
        self.bundle_cache = bundle_cache

    @staticmethod
    def empty():
        return PlacementGroup(_ids.PlacementGroupID.nil())

    def is_empty(self):
        return self.id.is_nil()

    @property
    def bundle_specs(self):
        if self.bundle_cache is None:
            table = placement_group_table(self)
            self.bundle_cache = [table["bundles"][i] for i in sorted(table["bundles"])]
        return self.bundle_cache

    @property
    def bundle_count(self):
        return len(self.bundle_specs)

    def ready(self):
        """An ObjectRef that resolves (to this group) once it is placed."""
        rt = _worker.runtime()
        oid = rt.ids.object_id()
        ref = ObjectRef(oid, _owned=True)
        value = _ser.dumps(PlacementGroup(self.id, self.bundle_cache))[0]
        _worker._request("pg_ready", {"pg": self.id.binary(), "obj": oid, "value": value})
        return ref

    def wait(self, timeout_seconds=30):
        """True once placed, False if timeout_seconds pass first."""
        try:
            _worker.get(self.ready(), timeout=timeout_seconds)
            return True
        except exceptions.GetTimeoutError:
            return False

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"PlacementGroup(id={self.id.hex()})"

    def __reduce__(self):
        return (PlacementGroup, (self.id, self.bundle_cache))


def _check_bundles(bundles):
    if not isinstance(bundles, list) or not bundles:
        raise ValueError(
            "The placement group `bundles` argument must be a list of dictionaries that is not "
            f"empty. Got {bundles}."
        )
    for b in bundles:
        if not isinstance(b, dict) or not b:
            raise ValueError(
                f"Bundles cannot be an empty dictionary or resources with only 0 values. " f"Bundles: {bundles}"
            )
        for name, amount in b.items():
            if not isinstance(name, str) or not isinstance(amount, (int, float)) or amount < 0:
                raise ValueError(f"Bundle resources must map names to non-negative numbers: {b}")
        if all(v == 0 for v in b.values()):
            raise ValueError(
                f"Bundles cannot be an empty dictionary or resources with only 0 values. " f"Bundles: {bundles}"
            )
    if any("bundle" in b for b in bundles):
        # Ray's GCS refuses the name it uses for its own per-bundle resource
        raise exceptions.RaySystemError(
            "bundle is a system reserved resource, which is not allowed to be used in placement group. "
        )


def placement_group(
    bundles, strategy="PACK", name="", lifetime=None, _soft_target_node_id=None, bundle_label_selector=None
):
    """Reserve bundles asynchronously; returns the handle at once."""
    _check_bundles(bundles)
    if strategy not in VALID_PLACEMENT_GROUP_STRATEGIES:
        raise ValueError(
            f"Invalid placement group strategy {strategy}. Supported strategies are: "
            f"{sorted(VALID_PLACEMENT_GROUP_STRATEGIES)}."
        )
    if lifetime not in (None, "detached"):
        raise ValueError(
            f"Placement group `lifetime` argument must be either `None` or 'detached'. " f"Got {lifetime}."
        )
    rt = _worker.runtime()
    pg_id = rt.ids.placement_group_id()
    specs = [{k: float(v) for k, v in b.items()} for b in bundles]
    _worker._request(
        "pg_create",
        {"pg": pg_id, "bundles": specs, "strategy": strategy, "name": name or "", "detached": lifetime == "detached"},
    )
    # zero amounts are dropped, as Ray's bundle_specs drops them
    return PlacementGroup(_ids.PlacementGroupID(pg_id), [{k: v for k, v in b.items() if v} for b in specs])


# How long remove_placement_group waits for the group's resources to be free.
# Ray's call returns at once and the removal completes in the background;
# beam's waits for beamd's answer (sent once the group's workers are gone:
# a few ms), so a group made next takes the resources at once, but no
# longer than this: a node that stops answering is declared dead only
# after --node-timeout, and the removal then completes in beamd.
_REMOVE_WAIT_S = 1.0


def remove_placement_group(placement_group):
    """Kills the actors placed in the group and frees its bundles. Returns
    once they are free again (beamd answers after the workers are gone), so
    a group made next can take them at once, or after _REMOVE_WAIT_S, the
    removal going on in beamd. A group that is gone already, or was never
    known, is no error (as Ray)."""
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError("remove_placement_group takes a PlacementGroup")
    try:
        _worker._request("pg_remove", {"pg": placement_group.id.binary()}, _REMOVE_WAIT_S)
    except ValueError:
        pass  # long gone (beamd keeps few removed groups): Ray's GCS answers OK too
    except TimeoutError:
        pass  # a node is slow to give the resources back: beamd completes the removal


def check_placement_group_index(placement_group, bundle_index):
    """Ray's check of a bundle index, at .remote()."""
    if placement_group.id.is_nil():
        if bundle_index != -1:
            raise ValueError("If placement group is not set, the value of bundle index must be -1.")
    elif bundle_index >= placement_group.bundle_count or bundle_index < -1:
        raise ValueError(
            f"placement group bundle index {bundle_index} is invalid. Valid placement group indexes: "
            f"0-{placement_group.bundle_count}"
        )


def _scheduling_state(t):
    """Ray's stats["scheduling_state"]: a pending group beamd tried to place
    and could not is NO_RESOURCES (Ray says so for an infeasible one too)."""
    if t["state"] == "CREATED":
        return "FINISHED"
    if t["state"] == "REMOVED":
        return "REMOVED"
    return "NO_RESOURCES" if t.get("attempts", 0) >= 1 else "QUEUED"


def _entry(t):
    latency = round(t.get("creation_latency_ms", 0.0), 3)  # Ray's: ms to the µs
    return {
        "placement_group_id": t["placement_group_id"],
        "name": t["name"],
        "bundles": {i: {k: v for k, v in b.items() if v} for i, b in enumerate(t["bundles"])},
        # every bundle, '' where it has no node (pending, or lost with its node), as Ray
        "bundles_to_node_id": dict(enumerate(t["bundles_to_node_id"])),
        "strategy": t["strategy"],
        "state": t["state"],
        "stats": {
            "end_to_end_creation_latency_ms": latency,
            "scheduling_latency_ms": latency,
            "scheduling_attempt": t.get("attempts", 1),
            "highest_retry_delay_ms": 0.0,
            "scheduling_state": _scheduling_state(t),
        },
    }


def placement_group_table(placement_group=None):
    """One group's table entry, or every group's keyed by id hex."""
    params = {"pg": placement_group.id.binary()} if placement_group is not None else {}
    reply = _worker._request("pg_table", params)
    groups = [_entry(t) for t in reply["groups"]]
    if placement_group is not None:
        if not groups:
            return {}
        return groups[0]
    return {g["placement_group_id"]: g for g in groups}


def get_placement_group(placement_group_name):
    for entry in placement_group_table().values():
        if entry["name"] == placement_group_name and entry["state"] != "REMOVED":
            return PlacementGroup(_ids.PlacementGroupID.from_hex(entry["placement_group_id"]))
    raise ValueError(f"Failed to look up placement group with name: {placement_group_name}")


def get_current_placement_group():
    """The group the current actor was placed in; None in a driver."""
    _worker.auto_init_ray()  # as Ray's: it starts Ray unless auto-connect is off
    if not _worker.is_initialized():
        return None
    pg = _worker.runtime().placement_group_id
    return PlacementGroup(_ids.PlacementGroupID(pg)) if pg else None
