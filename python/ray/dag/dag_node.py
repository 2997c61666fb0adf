# SPDX-License-Identifier: Apache-2.0
"""The graph a program builds with ``.bind``: InputNode (and its attributes),
ClassMethodNode (``actor.method.bind(...)``), MultiOutputNode.

Nodes only record what was bound; ``experimental_compile()`` on the output
node hands them to the compiler, ``compiled_dag_node.CompiledDAG``, which
installs itself here (``set_compiler``) when ``ray.dag`` is imported: this
module never imports it, so the nodes and their compiler make no circle. Remote-function nodes,
actor-creation nodes, collectives and uncompiled ``DAGNode.execute()`` are not
implemented: they raise ``CompiledGraphsNotSupportedError``.
"""

import itertools
import threading

from ray.experimental.channel.communicator import Communicator

_bind_counter = itertools.count()
_bind_lock = threading.Lock()
_compiler = None  # compiled_dag_node.CompiledDAG, once ray.dag is imported


def set_compiler(compiler):
    """Called by compiled_dag_node: what experimental_compile() builds."""
    global _compiler
    _compiler = compiler


_ADVICE = (
    "beam implements Ray Compiled Graphs for actor-method graphs "
    "(InputNode, actor.method.bind, MultiOutputNode, experimental_compile); "
    "{what} is not available."
)


class CompiledGraphsNotSupportedError(NotImplementedError):
    """A part of Ray's DAG API beam does not implement."""


def unsupported(what):
    raise CompiledGraphsNotSupportedError(_ADVICE.format(what=what))


def _next_bind_index():
    with _bind_lock:
        return next(_bind_counter)


class DAGNode:
    """Base of the node classes: its bound arguments and its options."""

    def __init__(self, *args, **kwargs):
        self._bound_args = args
        self._bound_kwargs = kwargs
        self._tensor_transport = None
        self._type_hint = None

    def get_args(self):
        return self._bound_args

    def get_kwargs(self):
        return self._bound_kwargs

    def with_tensor_transport(self, transport="auto", device="default", _static_shape=False, _direct_return=False):
        """Torch tensors in this node's output go to the next actor through the
        communicator registered with ``register_accelerator_context`` (when
        there is one), else inline in the frame. Returns self."""
        if not (
            isinstance(transport, Communicator)
            or (
                isinstance(transport, str)
                and transport.lower() in ("auto", "nccl", "accelerator", "cpu", "shm", "gloo")
            )
        ):
            raise ValueError(f"Invalid transport type: {transport}")
        self._tensor_transport = transport
        return self

    def with_type_hint(self, typ):
        """Accepts Ray's channel type hints; a TorchTensorType hint is a tensor
        transport. Returns self."""
        self._type_hint = typ
        transport = getattr(typ, "transport", None)
        if transport is not None and type(typ).__name__ == "TorchTensorType":
            self._tensor_transport = transport
        return self

    def experimental_compile(
        self,
        _submit_timeout=None,
        _buffer_size_bytes=None,
        enable_asyncio=False,
        _max_inflight_executions=None,
        _max_buffered_results=None,
        _overlap_gpu_communication=None,
        _default_communicator="create",
    ):
        """Compile the graph that ends at this node: a standing plan in each
        actor and direct sockets between them. Returns a CompiledDAG."""
        # ray.dag (imported before any of its modules) imports the compiler
        assert _compiler is not None, "ray.dag.compiled_dag_node was not imported"
        return _compiler(
            self,
            submit_timeout=_submit_timeout,
            enable_asyncio=enable_asyncio,
            max_inflight_executions=_max_inflight_executions,
            max_buffered_results=_max_buffered_results,
            overlap_gpu_communication=_overlap_gpu_communication,
        )

    def execute(self, *args, **kwargs):
        unsupported(f"{type(self).__name__}.execute() without experimental_compile()")

    def _children(self):
        out = [a for a in self._bound_args if isinstance(a, DAGNode)]
        out += [v for v in self._bound_kwargs.values() if isinstance(v, DAGNode)]
        return out


class InputNode(DAGNode):
    """The graph's input: ``with InputNode() as inp:``; ``inp`` stands for the
    one argument of ``execute``, ``inp[i]`` / ``inp.name`` for one of several."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def __getitem__(self, key):
        if not isinstance(key, (int, str)):
            raise ValueError(f"InputNode[{key!r}]: the key must be an int (a positional argument) or a str")
        return InputAttributeNode(self, key, "__getitem__")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return InputAttributeNode(self, name, "__getattr__")


class InputAttributeNode(DAGNode):
    """One positional (int key) or keyword (str key) argument of the input."""

    def __init__(self, dag_input_node, key, accessor_method="__getitem__"):
        super().__init__(dag_input_node)
        self._dag_input_node = dag_input_node
        self._key = key
        self._accessor_method = accessor_method

    @property
    def key(self):
        return self._key


class ClassMethodNode(DAGNode):
    """``actor.method.bind(*args, **kwargs)``: one call of an actor method per
    execution, its arguments nodes or constants."""

    def __init__(self, actor_handle, method_name, args, kwargs):
        super().__init__(*args, **kwargs)
        self._actor_handle = actor_handle
        self._method_name = method_name
        self._bind_index = _next_bind_index()
        for v in list(args) + list(kwargs.values()):
            if isinstance(v, (list, tuple, dict)) and _holds_node(v):
                unsupported("a DAG node nested inside a list, tuple or dict argument")
            if isinstance(v, MultiOutputNode):
                raise ValueError("A MultiOutputNode can only be the graph's output")

    def __repr__(self):
        return f"ClassMethodNode({self._actor_handle!r}.{self._method_name}, bind_index={self._bind_index})"


def _holds_node(value):
    items = value.values() if isinstance(value, dict) else value
    return any(isinstance(v, DAGNode) or (isinstance(v, (list, tuple, dict)) and _holds_node(v)) for v in items)


class MultiOutputNode(DAGNode):
    """Several nodes as the graph's outputs: ``execute`` returns one ref each."""

    def __init__(self, args, other_args_to_resolve=None):
        if isinstance(args, tuple):
            args = list(args)
        if not isinstance(args, list):
            raise ValueError("MultiOutputNode takes a list of nodes")
        super().__init__(*args)


class DAGInputData:
    """The arguments a graph execution was given."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs


class FunctionNode(DAGNode):
    """A remote-function call in a graph (not implemented)."""

    def experimental_compile(self, *args, **kwargs):
        unsupported("a graph of remote functions (FunctionNode)")


class ClassNode(DAGNode):
    """An actor creation in a graph (not implemented)."""

    def experimental_compile(self, *args, **kwargs):
        unsupported("a graph that creates actors (ClassNode)")


class CollectiveOutputNode(DAGNode):
    """The output of a collective operation in a graph (not implemented)."""

    def experimental_compile(self, *args, **kwargs):
        unsupported("collective operations in a graph")


def bind_method(actor_method, args, kwargs):
    """``ActorMethod.bind``: the node for one call of the method."""
    return ClassMethodNode(actor_method._handle, actor_method._name, args, kwargs)
