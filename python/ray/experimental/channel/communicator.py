# SPDX-License-Identifier: Apache-2.0
"""The interface of a tensor communicator for compiled graphs (Ray's
``Communicator``), and ``TorchTensorAllocator``.

beam builds the registered class in each actor that sends or receives
tensors over a ``with_tensor_transport`` edge, as Ray does:
``cls(world_size, comm_id, rank, actor_handles, cuda_stream)`` with
``cuda_stream=None``, then ``initialize(rank)``; it maps each peer with
``get_rank(peer_handle)``, moves each tensor with ``send(tensor, peer_rank)``
/ ``recv(shape, dtype, peer_rank, allocator)`` (only the rest of the value
travels in the frame) and calls ``destroy()`` at teardown.
"""

from abc import ABC, abstractmethod
from typing import Callable, Tuple

TorchTensorAllocator = Callable[[Tuple[int], "torch.dtype"], "torch.Tensor"]  # noqa: F821


class Communicator(ABC):
    """A group of actors that move torch tensors between them."""

    @abstractmethod
    def initialize(self, rank):
        """Set up this actor's side; called in the actor."""

    @abstractmethod
    def get_actor_handles(self):
        """The actors of the group, in rank order."""

    @abstractmethod
    def get_rank(self, actor):
        """The rank of ``actor`` (a handle) in the group."""

    @abstractmethod
    def get_self_rank(self):
        """This actor's rank; None in the driver."""

    def get_world_size(self):
        """The number of actors in the group."""
        raise NotImplementedError

    @abstractmethod
    def send(self, value, peer_rank):
        """Send a torch tensor to peer_rank."""

    @abstractmethod
    def recv(self, shape, dtype, peer_rank, allocator):
        """Receive a tensor of shape and dtype from peer_rank; ``allocator(
        shape, dtype)`` makes the buffer when the implementation wants one."""

    @property
    @abstractmethod
    def recv_stream(self):
        """The stream receives run on (a context manager)."""

    @property
    @abstractmethod
    def send_stream(self):
        """The stream sends run on (a context manager)."""

    @abstractmethod
    def allgather(self, send_buf, recv_buf):
        """Collective all-gather."""

    @abstractmethod
    def allreduce(self, send_buf, recv_buf, op=None):
        """Collective all-reduce."""

    @abstractmethod
    def reducescatter(self, send_buf, recv_buf, op=None):
        """Collective reduce-scatter."""

    @abstractmethod
    def destroy(self):
        """Release what the communicator holds; called at teardown."""

    @abstractmethod
    def get_transport_name(self):
        """The transport's name (e.g. "nccl")."""

    @classmethod
    def generate_communicator_id(cls):
        """A fresh id for a group; the driver passes it to every member."""
        import uuid

        return uuid.uuid4()
