# SPDX-License-Identifier: Apache-2.0
"""Compiled Graphs settings (``DAGContext``), with Ray's defaults and the
``RAY_CGRAPH_*`` environment variables read once, when ``ray.dag`` is first
imported (vLLM sets ``RAY_CGRAPH_get_timeout`` just before that import)."""

import os
import threading
from dataclasses import dataclass


def _env_number(name, default, kind=int):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(float(raw)) if kind is int else kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


DEFAULT_SUBMIT_TIMEOUT_S = _env_number("RAY_CGRAPH_submit_timeout", 10)
DEFAULT_GET_TIMEOUT_S = _env_number("RAY_CGRAPH_get_timeout", 10)
DEFAULT_TEARDOWN_TIMEOUT_S = _env_number("RAY_CGRAPH_teardown_timeout", 30)
DEFAULT_READ_ITERATION_TIMEOUT_S = _env_number("RAY_CGRAPH_read_iteration_timeout_s", 0.1, float)
DEFAULT_BUFFER_SIZE_BYTES = _env_number("RAY_CGRAPH_buffer_size_bytes", 1000000)
DEFAULT_MAX_INFLIGHT_EXECUTIONS = _env_number("RAY_CGRAPH_max_inflight_executions", 10)
DEFAULT_MAX_BUFFERED_RESULTS = _env_number("RAY_CGRAPH_max_buffered_results", 1000)
DEFAULT_OVERLAP_GPU_COMMUNICATION = bool(_env_number("RAY_CGRAPH_overlap_gpu_communication", 0))

_default_context = None
_context_lock = threading.Lock()


@dataclass
class DAGContext:
    """Global settings for compiled graphs; ``DAGContext.get_current()`` is
    the one every compile reads (change its fields before compiling)."""

    submit_timeout: int = DEFAULT_SUBMIT_TIMEOUT_S
    get_timeout: int = DEFAULT_GET_TIMEOUT_S
    teardown_timeout: int = DEFAULT_TEARDOWN_TIMEOUT_S
    read_iteration_timeout: float = DEFAULT_READ_ITERATION_TIMEOUT_S
    buffer_size_bytes: int = DEFAULT_BUFFER_SIZE_BYTES
    max_inflight_executions: int = DEFAULT_MAX_INFLIGHT_EXECUTIONS
    max_buffered_results: int = DEFAULT_MAX_BUFFERED_RESULTS
    overlap_gpu_communication: bool = DEFAULT_OVERLAP_GPU_COMMUNICATION

    @staticmethod
    def get_current():
        global _default_context
        with _context_lock:
            if _default_context is None:
                _default_context = DAGContext()
            return _default_context
