# SPDX-License-Identifier: Apache-2.0
"""ray.get_runtime_context(): what this process is (driver or actor), where
it runs, and what it was given."""


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
        """Deprecated in Ray: the ids as ID objects (actor_id and task_id only where set)."""
        from ray._private import ids as _ids

        out = {"job_id": _ids.JobID(self._rt.job_id_bytes), "node_id": _ids.NodeID(self._rt.node_id),
               "namespace": self.namespace}
        if self._rt.actor_id is not None:
            out["actor_id"] = _ids.ActorID(self._rt.actor_id)
            task = getattr(self._rt, "task_id", None)
            if task is not None:
                out["task_id"] = _ids.TaskID(task)
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
        if self._rt.actor_id is None:
            return None
        return self._rt.actor_id.hex()

    def get_actor_name(self):
        return getattr(self._rt, "actor_name", None) or None

    def get_task_id(self):
        return None

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
        assert self._rt.mode == "worker", (
            "This method is only available when the process is a worker. Current mode: 0")
        return dict(getattr(self._rt, "assigned_resources", {}) or {})

    def get_runtime_env_string(self):
        import json

        return json.dumps(self._rt.runtime_env or {})

    @property
    def runtime_env(self):
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
        from ray._private import ids as _ids

        return _ids.NodeID(self._rt.node_id)

    @property
    def job_id(self):
        """Deprecated in Ray: the JobID (use get_job_id() for its hex)."""
        from ray._private import ids as _ids

        return _ids.JobID(self._rt.job_id_bytes)

    @property
    def worker(self):
        return self._rt


def get_runtime_context():
    """The current process's RuntimeContext. Like Ray, it connects as
    ray.init() would unless auto-connect is off; then it connects nothing."""
    from ray._private import auto_init_hook

    auto_init_hook.auto_init_ray()
    return RuntimeContext()


