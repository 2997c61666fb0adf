# SPDX-License-Identifier: Apache-2.0
"""``ray.dag``: Ray Compiled Graphs for actor-method graphs, on beam.

``with InputNode() as inp:``, ``actor.method.bind(...)``, ``MultiOutputNode``,
``.with_tensor_transport(...)`` and ``experimental_compile()`` build a
CompiledDAG: a standing plan in each actor run by a background thread of the
actor, with direct sockets between the actors and to the driver (see
``compiled_dag_node`` and ``_runtime``; docs/API.md says what is emulated).
Importing this package reads the ``RAY_CGRAPH_*`` environment variables
(``ray.dag.context``), as Ray does.
"""

from ray.dag.compiled_dag_node import CompiledDAG, build_compiled_dag_from_ray_dag
from ray.dag.context import DAGContext
from ray.dag.dag_node import (
    ClassMethodNode,
    ClassNode,
    CollectiveOutputNode,
    CompiledGraphsNotSupportedError,
    DAGInputData,
    DAGNode,
    FunctionNode,
    InputAttributeNode,
    InputNode,
    MultiOutputNode,
    unsupported,
)

# Key names Ray's DAG code uses in node options; kept for importers.
PARENT_CLASS_NODE_KEY = "parent_class_node"
PREV_CLASS_METHOD_CALL_KEY = "prev_class_method_call"
BIND_INDEX_KEY = "bind_index"
IS_CLASS_METHOD_OUTPUT_KEY = "is_class_method_output"
COLLECTIVE_OPERATION_KEY = "collective_operation"
DAGNODE_TYPE_KEY = "__dag_node_type__"


def plot(*args, **kwargs):
    """Ray draws a DAG with graphviz; not implemented."""
    unsupported("ray.dag.plot()")


__all__ = [
    "BIND_INDEX_KEY",
    "COLLECTIVE_OPERATION_KEY",
    "ClassMethodNode",
    "ClassNode",
    "CollectiveOutputNode",
    "CompiledDAG",
    "CompiledGraphsNotSupportedError",
    "DAGContext",
    "DAGInputData",
    "DAGNODE_TYPE_KEY",
    "DAGNode",
    "FunctionNode",
    "IS_CLASS_METHOD_OUTPUT_KEY",
    "InputAttributeNode",
    "InputNode",
    "MultiOutputNode",
    "PARENT_CLASS_NODE_KEY",
    "PREV_CLASS_METHOD_CALL_KEY",
    "build_compiled_dag_from_ray_dag",
    "plot",
    "unsupported",
]
