# SPDX-License-Identifier: Apache-2.0
"""``ray.experimental.channel``: the names vLLM's compiled-graph code imports.

``communicator.Communicator`` (the interface a custom tensor communicator
implements) and ``TorchTensorAllocator``; ``accelerator_context.
register_accelerator_context`` (registers the communicator class a compiled
graph uses for ``with_tensor_transport`` edges); ``TorchTensorType`` (a type
hint naming a tensor transport). beam's channels themselves are the sockets
in ``ray.dag._transport``.
"""

from ray.experimental.channel.communicator import Communicator, TorchTensorAllocator  # noqa: F401
from ray.experimental.channel.torch_tensor_type import TorchTensorType  # noqa: F401

__all__ = ["Communicator", "TorchTensorAllocator", "TorchTensorType"]
