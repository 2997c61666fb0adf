# SPDX-License-Identifier: Apache-2.0
"""Ray 2.43's option names, and nothing else: read by ``options`` (what beam
does with each) and by scripts/scan_vllm_ray.py (which loads this file by
its path, without importing the ray package), so the list is written once."""

# Ray 2.43's names (ray/_private/ray_option_utils.py): common, actor-only, task-only.
COMMON_OPTIONS = (
    "accelerator_type",
    "memory",
    "name",
    "num_cpus",
    "num_gpus",
    "object_store_memory",
    "placement_group",
    "placement_group_bundle_index",
    "placement_group_capture_child_tasks",
    "resources",
    "runtime_env",
    "scheduling_strategy",
    "_metadata",
    "enable_task_events",
    "_labels",
)
ACTOR_ONLY_OPTIONS = (
    "concurrency_groups",
    "lifetime",
    "max_concurrency",
    "max_restarts",
    "max_task_retries",
    "max_pending_calls",
    "namespace",
    "get_if_exists",
)
TASK_ONLY_OPTIONS = (
    "max_calls",
    "max_retries",
    "num_returns",
    "retry_exceptions",
    "_generator_backpressure_num_objects",
)
