# SPDX-License-Identifier: Apache-2.0
"""ray._raylet: where Ray keeps ObjectRef and the id classes."""

from ray._private.ids import ActorID, JobID, NodeID, PlacementGroupID, TaskID, WorkerID
from ray._private.object_ref import ObjectRef

ObjectID = ObjectRef

__all__ = ["ObjectRef", "ObjectID", "ActorID", "JobID", "NodeID", "PlacementGroupID", "TaskID", "WorkerID"]
