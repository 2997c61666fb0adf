# SPDX-License-Identifier: Apache-2.0
"""``ray.dag`` names, without Ray Compiled Graphs behind them.

beam does not implement Ray's DAG API or Compiled Graphs (aDAG). This module
owns the names so that imports and annotations written against Ray work:
``InputNode()`` (also as a context manager), ``MultiOutputNode(...)`` and the
other node classes can be constructed, but building a graph on them, compiling
it or executing it raises ``CompiledGraphsNotSupportedError`` (a
``NotImplementedError``) that says to use vLLM's RayExecutorV2.

vLLM only takes the compiled-graph path in ``RayDistributedExecutor``; before
it builds a graph it checks ``importlib.util.find_spec(
"ray.experimental.compiled_dag_ref")``, which beam leaves absent on purpose, so
vLLM stops there with its own clear error. The core's ``ActorMethod.bind`` can
call ``unsupported("...")`` here to fail the same way.
"""

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
    "plot",
    "unsupported",
]

# Key names Ray's DAG code uses in node options; kept for importers.
PARENT_CLASS_NODE_KEY = "parent_class_node"
PREV_CLASS_METHOD_CALL_KEY = "prev_class_method_call"
BIND_INDEX_KEY = "bind_index"
IS_CLASS_METHOD_OUTPUT_KEY = "is_class_method_output"
COLLECTIVE_OPERATION_KEY = "collective_operation"
DAGNODE_TYPE_KEY = "__dag_node_type__"

_ADVICE = (
    "beam does not implement Ray Compiled Graphs (ray.dag): {what} is not "
    "available. For vLLM, use RayExecutorV2, which needs only actors and "
    "placement groups: set VLLM_USE_RAY_V2_EXECUTOR_BACKEND=1 (the default "
    "since vLLM 0.21)."
)


class CompiledGraphsNotSupportedError(NotImplementedError):
    """Raised for any use of Ray's DAG / Compiled Graphs API under beam."""


def unsupported(what):
    """Raise CompiledGraphsNotSupportedError naming ``what`` (e.g.
    ``"ActorMethod.bind()"``)."""
    raise CompiledGraphsNotSupportedError(_ADVICE.format(what=what))


class DAGNode:
    """Base of the DAG node classes; holds its arguments, does nothing."""

    def __init__(self, *args, **kwargs):
        self._bound_args = args
        self._bound_kwargs = kwargs

    def get_args(self):
        return self._bound_args

    def get_kwargs(self):
        return self._bound_kwargs

    def execute(self, *args, **kwargs):
        unsupported(f"{type(self).__name__}.execute()")

    def experimental_compile(self, *args, **kwargs):
        unsupported(f"{type(self).__name__}.experimental_compile()")

    def with_tensor_transport(self, *args, **kwargs):
        unsupported(f"{type(self).__name__}.with_tensor_transport()")

    def with_type_hint(self, *args, **kwargs):
        unsupported(f"{type(self).__name__}.with_type_hint()")

    def __getitem__(self, key):
        # In Ray, indexing a node builds an InputAttributeNode.
        unsupported(f"{type(self).__name__}[{key!r}]")


class InputNode(DAGNode):
    """The graph's input placeholder; ``with InputNode() as inp:`` works."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


class InputAttributeNode(DAGNode):
    """One attribute or item of the graph's input."""


class DAGInputData:
    """The arguments a graph execution was given."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs


class FunctionNode(DAGNode):
    """A remote-function call in a graph."""


class ClassNode(DAGNode):
    """An actor creation in a graph."""


class ClassMethodNode(DAGNode):
    """An actor-method call in a graph."""


class CollectiveOutputNode(DAGNode):
    """The output of a collective operation in a graph."""


class MultiOutputNode(DAGNode):
    """Several nodes gathered as the graph's outputs."""

    def __init__(self, args, other_args_to_resolve=None):
        super().__init__(*list(args))


class CompiledDAG:
    """What ``experimental_compile()`` returns in Ray; never produced here.

    ``teardown()`` is a no-op so shutdown paths that call it on whatever they
    hold do not fail; ``execute`` raises.
    """

    def __init__(self, *args, **kwargs):
        pass

    def execute(self, *args, **kwargs):
        unsupported("CompiledDAG.execute()")

    def execute_async(self, *args, **kwargs):
        unsupported("CompiledDAG.execute_async()")

    def visualize(self, *args, **kwargs):
        unsupported("CompiledDAG.visualize()")

    def teardown(self, *args, **kwargs):
        return None


class DAGContext:
    """Ray's Compiled Graphs settings object; carried as plain attributes."""

    def __init__(self, **settings):
        self.__dict__.update(settings)

    @staticmethod
    def get_current():
        return DAGContext()


def plot(*args, **kwargs):
    """Ray draws a DAG with graphviz; beam has no DAGs to draw."""
    unsupported("ray.dag.plot()")
