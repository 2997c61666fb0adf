# SPDX-License-Identifier: Apache-2.0
"""ray.get_runtime_context(): what this process is (driver or actor), where
it runs, and what it was given."""


from ray._private import worker as _worker

ACCELERATOR_NAMES = ("GPU", "TPU", "neuron_cores", "HPU", "NPU")


class RuntimeContext:
    """A view of the current process's runtime, as Ray's RuntimeContext."""

    def __init__(self, rt):
        self._rt = rt

    def get(self):
        return {"job_id": self.get_job_id(), "node_id": self.get_node_id(), "namespace": self.namespace}

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
        return self.get_node_id()

    @property
    def job_id(self):
        return self.get_job_id()

    @property
    def worker(self):
        return self._rt


def get_runtime_context():
    """The current process's RuntimeContext (connecting as ray.init() would)."""
    return RuntimeContext(_worker.runtime())


