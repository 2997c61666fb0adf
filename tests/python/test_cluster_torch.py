# SPDX-License-Identifier: Apache-2.0
"""vLLM's two-node shape on a beam cluster: a world of 4 over 2 nodes with 2
(pretend) GPUs each. A placement group of 4 one-GPU bundles with bundle 0
pinned to the driver's node by `node:<ip>: 0.001`; one worker per bundle;
workers sorted by node, the driver's first (as RayExecutor sorts them), each
reporting its node id, IP and GPU ids; then the 4 workers form a
torch.distributed gloo group (rank = sorted position, rendezvous at
tcp://127.0.0.1:<free port>) and all-reduce a tensor. The actor calls only
set the group up; the tensor travels between the workers.

gloo is told to use the loopback interface (GLOO_SOCKET_IFNAME=lo), so no
traffic leaves the machine. Skipped when torch is not installed."""

import os

from beamkit.gloo import NEEDS_TORCH

pytestmark = NEEDS_TORCH

WORLD = 4
N = 1 << 18  # floats per rank: 1 MiB on the wire each way


def test_two_nodes_four_ranks_gloo_all_reduce(make_cluster, tmp_path):
    c = make_cluster(members=1, gpus=2, member_gpu_ids=[[2, 3]])
    import ray

    ray.init(address=c.head.socket)
    from ray.util import get_node_ip_address, placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ids = c.alive_nodes()
    driver_ip = get_node_ip_address()
    driver_node = ray.get_runtime_context().get_node_id()
    assert driver_ip == "127.0.0.1" and driver_node == ids[driver_ip]

    bundles = [{"GPU": 1.0} for _ in range(WORLD)]
    bundles[0][f"node:{driver_ip}"] = 0.001
    pg = placement_group(bundles, strategy="PACK")
    ray.get(pg.ready(), timeout=15)
    placed = placement_group_table(pg)["bundles_to_node_id"]
    assert placed[0] == driver_node
    assert sorted(placed.values()) == sorted([ids["127.0.0.1"]] * 2 + [ids["127.0.0.2"]] * 2)

    @ray.remote(num_cpus=0, num_gpus=1)
    class TorchWorker:
        def get_node_and_gpu_ids(self):
            return (
                ray.get_runtime_context().get_node_id(),
                get_node_ip_address(),
                [int(g) for g in ray.get_runtime_context().get_accelerator_ids()["GPU"]],
                os.getpid(),
            )

        def init_group(self, rank, world, init_method):
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
            self.rank = rank
            return dist.get_rank(), dist.get_world_size()

        def all_reduce(self, n):
            import torch
            import torch.distributed as dist

            t = torch.full((n,), float(self.rank + 1))
            dist.all_reduce(t)
            out = (float(t.min()), float(t.max()))
            dist.destroy_process_group()
            return out

    env = {"env_vars": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}}
    workers = [
        TorchWorker.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i), runtime_env=env
        ).remote()
        for i in range(WORLD)
    ]
    info = ray.get([w.get_node_and_gpu_ids.remote() for w in workers], timeout=30)
    for i, (nid, ip, gpus, _) in enumerate(info):
        assert nid == placed[i] and ids[ip] == nid and len(gpus) == 1

    # vLLM's order: the driver's node first, then by IP
    order = sorted(range(WORLD), key=lambda i: (info[i][1] != driver_ip, info[i][1], info[i][2]))
    ranked = [workers[i] for i in order]
    node_of_rank = [info[i][1] for i in order]
    assert node_of_rank == ["127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"]
    gpus_by_node = {}
    for i in order:
        gpus_by_node.setdefault(info[i][1], []).extend(info[i][2])
    assert sorted(gpus_by_node["127.0.0.1"]) == [0, 1] and sorted(gpus_by_node["127.0.0.2"]) == [2, 3]
    # and each rank's worker really runs under its node's daemon
    from beamkit.procs import beam_processes

    for i in order:
        sock = c.head.socket if info[i][1] == "127.0.0.1" else c.members[0].socket
        assert info[i][3] in beam_processes(sock)

    # a file rendezvous (the ranks then connect over TCP between the nodes):
    # a port picked free and bound later can be taken meanwhile
    init_method = f"file://{tmp_path}/gloo-rendezvous"
    assert ray.get([w.init_group.remote(r, WORLD, init_method) for r, w in enumerate(ranked)], timeout=60) == [
        (r, WORLD) for r in range(WORLD)
    ]
    want = float(sum(range(1, WORLD + 1)))
    assert ray.get([w.all_reduce.remote(N) for w in ranked], timeout=60) == [(want, want)] * WORLD
