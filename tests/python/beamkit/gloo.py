# SPDX-License-Identifier: Apache-2.0
"""torch for the compiled-graph tests: the skip marks of a module that
needs torch, and GlooComm, a Communicator whose send/recv go over gloo (a
real torch.distributed group between the graph's actors), counting what it
did in COMM_STATS of the process it runs in."""

import importlib.util
import os

import pytest

from ray.experimental.channel.communicator import Communicator

NEEDS_TORCH = [
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None, reason="torch is not installed (Debian: python3-torch)"
    ),
    # the ASan pass preloads libasan into every Python; torch's C++ exceptions then abort
    pytest.mark.skipif(
        "libasan" in os.environ.get("LD_PRELOAD", ""),
        reason="torch does not run with libasan preloaded (the sanitizer pass)",
    ),
]

# What the communicator did in this process (read back with an ordinary call).
COMM_STATS = {"sends": 0, "recvs": 0, "bytes": 0, "created": 0, "destroyed": 0}


class GlooComm(Communicator):
    """A communicator shaped like vLLM's RayPPCommunicator, over the
    torch.distributed gloo group the workers joined with ordinary calls: it
    ignores Ray's rank, maps actor ids to group ranks with an all-gather, and
    sends / receives with dist.send / dist.recv."""

    def __init__(self, world_size, comm_id, rank, actor_handles, cuda_stream, use_communication_streams=False):
        import torch.distributed as dist

        import ray

        self._world_size = world_size
        self._actor_handles = actor_handles
        self._closed = False
        self._rank = None
        if rank is not None:
            me = ray.get_runtime_context().current_actor._actor_id.hex()
            assert len(me) == 32
            ids = [None] * dist.get_world_size()
            dist.all_gather_object(ids, me)
            self._actor_id_to_rank = {a: r for r, a in enumerate(ids)}
            self._rank = dist.get_rank()
            COMM_STATS["created"] += 1

    def initialize(self, rank):
        pass

    def get_actor_handles(self):
        return self._actor_handles

    def get_rank(self, actor):
        return self._actor_id_to_rank[actor._actor_id.hex()]

    def get_self_rank(self):
        return self._rank

    def get_world_size(self):
        return self._world_size

    def send(self, buf, peer_rank):
        import torch.distributed as dist

        from ray.exceptions import RayChannelError

        if self._closed:
            raise RayChannelError("GlooComm has been destroyed.")
        dist.send(buf.contiguous(), dst=peer_rank)
        COMM_STATS["sends"] += 1
        COMM_STATS["bytes"] += buf.numel() * buf.element_size()

    def recv(self, shape, dtype, peer_rank, allocator):
        import torch.distributed as dist

        buf = allocator(shape, dtype)
        dist.recv(buf, src=peer_rank)
        COMM_STATS["recvs"] += 1
        return buf

    def allgather(self, send_buf, recv_buf):
        raise NotImplementedError

    def allreduce(self, send_buf, recv_buf, op=None):
        raise NotImplementedError

    def reducescatter(self, send_buf, recv_buf, op=None):
        raise NotImplementedError

    @property
    def recv_stream(self):
        return None

    @property
    def send_stream(self):
        return None

    def destroy(self):
        self._closed = True
        COMM_STATS["destroyed"] += 1

    def get_transport_name(self):
        return "gloo"
