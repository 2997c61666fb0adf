# SPDX-License-Identifier: Apache-2.0
"""CompiledDAGRef: what ``CompiledDAG.execute`` returns, one per output.

``ref.get(timeout)`` (or ``ray.get(ref)`` / ``ray.get([refs])``) works once;
it reads the outputs of every execution up to its own and buffers the other
refs' values, so refs can be read in any order. A ref cannot be copied or
pickled, and ``ray.wait`` refuses it. A worker's exception comes back as Ray
raises it: an instance of RayTaskError and of the cause's class.
"""

from ray.dag._transport import Err
from ray.exceptions import RayChannelTimeoutError, RayTaskError


def _process_return_vals(return_vals, return_single_output):
    for val in return_vals:
        if type(val) is Err:
            exc = val.exc
            if isinstance(exc, RayTaskError):
                raise exc.as_instanceof_cause()
            raise exc
    if return_single_output:
        assert len(return_vals) == 1
        return return_vals[0]
    return return_vals


class CompiledDAGRef:
    """A reference to one output of one compiled-graph execution."""

    def __init__(self, dag, execution_index, channel_index=None):
        self._dag = dag
        self._execution_index = execution_index
        self._channel_index = channel_index
        self._ray_get_called = False
        self._dag_output_channels = dag.dag_output_channels

    def __str__(self):
        return (
            f"CompiledDAGRef({self._dag.get_id()}, execution_index={self._execution_index}, "
            f"channel_index={self._channel_index})"
        )

    __repr__ = __str__

    def __copy__(self):
        raise ValueError("CompiledDAGRef cannot be copied.")

    def __deepcopy__(self, memo):
        raise ValueError("CompiledDAGRef cannot be deep copied.")

    def __reduce__(self):
        raise ValueError("CompiledDAGRef cannot be pickled.")

    def __del__(self):
        try:
            if self._dag.is_teardown or self._ray_get_called:
                return
            self._dag._release_ref(self._execution_index, self._channel_index)
        except Exception:
            pass

    def get(self, timeout=None):
        """The output's value. ``timeout``: seconds; None means
        RAY_CGRAPH_get_timeout (read when ray.dag was imported), -1 forever.
        Expiry raises RayChannelTimeoutError and leaves the graph usable."""
        if self._ray_get_called:
            raise ValueError("ray.get() can only be called once on a CompiledDAGRef, and it was already called.")
        self._ray_get_called = True
        try:
            self._dag._execute_until(self._execution_index, self._channel_index, timeout)
        except RayChannelTimeoutError:
            self._dag._release_ref(self._execution_index, self._channel_index, timed_out=True)
            raise
        return_vals = self._dag._get_execution_results(self._execution_index, self._channel_index)
        return _process_return_vals(return_vals, True)


def _get(object_refs, timeout):
    """``ray.get`` on CompiledDAGRefs: one, or a list of only those."""
    if isinstance(object_refs, CompiledDAGRef):
        return object_refs.get(timeout=timeout)
    if all(isinstance(r, CompiledDAGRef) for r in object_refs):
        return [r.get(timeout=timeout) for r in object_refs]
    raise ValueError(
        "Invalid type of object refs. 'object_refs' must be a list of CompiledDAGRefs if there is "
        "any CompiledDAGRef within it. "
    )


class CompiledDAGFuture:
    """Ray's asyncio counterpart; beam does not implement asyncio graphs."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("beam does not implement asyncio compiled graphs (enable_asyncio=True)")
