# SPDX-License-Identifier: Apache-2.0
"""ray.get_runtime_context(): what this process is (driver or actor), where
it runs, and what it was given."""

from ray._private import ids as _ids
from ray._private import worker as _worker

ACCELERATOR_NAMES = ("GPU", "TPU", "neuron_cores", "HPU", "NPU")


class RuntimeContext:
    """A view of the current process's runtime, as Ray's RuntimeContext."""

    def __init__(self, rt=None):
        self._given = rt

    @property
    def _rt(self):
        # the runtime of now: a context made before ray.init() works after it
        return self._given or _worker.runtime()

    def get(self):
        """Deprecated in Ray: the ids as ID objects, as Ray's dict: job_id,
        node_id and namespace; in a worker task_id too, and actor_id in an
        actor (not in a task)."""
        rt = self._rt
        out = {"job_id": _ids.JobID(rt.job_id_bytes), "node_id": _ids.NodeID(rt.node_id), "namespace": self.namespace}
        if rt.mode == "worker":
            task = getattr(rt, "task_id", None)
            if task is not None:
                out["task_id"] = _ids.TaskID(task)
            if rt.actor_id is not None and not rt.is_task:
                out["actor_id"] = _ids.ActorID(rt.actor_id)
        return out

    def get_node_id(self):
        assert _worker.is_initialized(), "Ray is not initialized; call ray.init() first."
        return self._rt.node_id.hex()

    def get_job_id(self):
        assert _worker.is_initialized(), "Ray is not initialized; call ray.init() first."
        return self._rt.job_id_bytes.hex()

    def get_worker_id(self):
        return (self._rt.node_id[:24] + self._rt.conn.to_bytes(4, "big")).hex()

    def get_actor_id(self):
        """The actor's id in hex; None in a driver and in a task, as Ray's."""
        rt = self._rt
        if rt.actor_id is None or rt.is_task:
            return None
        return rt.actor_id.hex()

    def get_actor_name(self):
        return getattr(self._rt, "actor_name", None) or None

    def get_task_id(self):
        """The current call's task id in hex in a worker; None in a driver."""
        task = getattr(self._rt, "task_id", None) if self._rt.mode == "worker" else None
        return task.hex() if task else None

    @property
    def task_id(self):
        """Deprecated in Ray: the TaskID (use get_task_id() for its hex)."""
        assert self._rt.mode == "worker", "This method is only available when the process is a worker. Current mode: 0"
        task = getattr(self._rt, "task_id", None)
        return _ids.TaskID(task) if task else None

    @property
    def actor_id(self):
        """Deprecated in Ray: the ActorID (use get_actor_id() for its hex)."""
        assert self._rt.mode == "worker", "This method is only available when the process is a worker. Current mode: 0"
        hex_id = self.get_actor_id()
        return _ids.ActorID.from_hex(hex_id) if hex_id else None

    def get_placement_group_id(self):
        pg = self._rt.placement_group_id
        return pg.hex() if pg else None

    def get_accelerator_ids(self):
        ids = {name: [] for name in ACCELERATOR_NAMES}
        ids["GPU"] = [str(g) for g in self._rt.gpu_ids]
        return ids

    def get_assigned_resources(self):
        """What this actor or task holds ({name: amount}); a driver has none
        and, as in Ray, asking there is an AssertionError."""
        assert self._rt.mode == "worker", "This method is only available when the process is a worker. Current mode: 0"
        return dict(getattr(self._rt, "assigned_resources", {}) or {})

    def get_runtime_env_string(self):
        import json

        return json.dumps(self._rt.runtime_env or {})

    @property
    def runtime_env(self):
        # here: ray.runtime_env costs ~3 ms at `import ray` and only this property needs it
        from ray.runtime_env import RuntimeEnv

        env = dict(self._rt.runtime_env or {})
        return RuntimeEnv(**env) if env else RuntimeEnv()

    @property
    def current_actor(self):
        if self._rt.actor_handle is None:
            raise RuntimeError("This method is only available in an actor.")
        return self._rt.actor_handle

    @property
    def namespace(self):
        return self._rt.namespace

    @property
    def gcs_address(self):
        return self._rt.socket

    @property
    def was_current_actor_reconstructed(self):
        return False

    @property
    def should_capture_child_tasks_in_placement_group(self):
        return bool(getattr(self._rt, "capture_child_tasks", False))

    def get_node_ip_address(self):
        return self._rt.node_ip

    @property
    def node_id(self):
        """Deprecated in Ray: the NodeID (use get_node_id() for its hex)."""
        return _ids.NodeID(self._rt.node_id)

    @property
    def job_id(self):
        """Deprecated in Ray: the JobID (use get_job_id() for its hex)."""
        return _ids.JobID(self._rt.job_id_bytes)

    @property
    def worker(self):
        return self._rt


def get_runtime_context():
    """The current process's RuntimeContext. Like Ray, it connects as
    ray.init() would unless auto-connect is off; then it connects nothing."""
    _worker.auto_init_ray()
    return RuntimeContext()
