#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A vLLM-shaped workload on beam, following RayExecutorV2's lifecycle:
a placement group for the world, one named GPU worker actor per bundle,
node/GPU discovery, initialisation, a never-returning run() on each, a
monitor thread on ray.wait, then one worker dies and the monitor notices.
It prints what happened at each step."""

import os
import sys
import threading
import time

import ray
from ray.util.placement_group import placement_group, placement_group_table
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

WORLD = int(os.environ.get("DEMO_WORLD_SIZE", "4"))
T0 = time.monotonic()


def say(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


class RayWorkerProc:
    """Stands in for vLLM's worker: a light constructor, then init, then run()."""

    def __init__(self, rank, distributed_init_method):
        self.rank = rank
        self.method = distributed_init_method

    def get_node_and_gpu_ids(self):
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), [int(g) for g in ctx.get_accelerator_ids()["GPU"]]

    def initialize_worker(self, local_rank, env, driver_env):
        for k, v in driver_env.items():
            os.environ.setdefault(k, v)
        os.environ.update(env)
        self.local_rank = local_rank
        print(f"rank {self.rank}: local rank {local_rank}, CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
        return os.getpid()

    def wait_for_init(self):
        return {"status": "READY", "rank": self.rank}

    def run(self):
        while True:  # vLLM's worker_busy_loop: serves its message queue forever
            time.sleep(0.05)


def main():
    if not ray.is_initialized():
        ray.init()
    say(f"connected: node {ray.get_runtime_context().get_node_id()[:12]}..., " f"resources {ray.cluster_resources()}")
    ip = ray.util.get_node_ip_address()
    specs = [{"GPU": 1.0} for _ in range(WORLD)]
    specs[0][f"node:{ip}"] = 0.001
    pg = placement_group(specs, strategy="PACK")
    ready, _ = ray.wait([pg.ready()], timeout=10)
    assert ready, "the placement group was not placed"
    table = placement_group_table(pg)
    say(
        f"placement group {pg.id.hex()} {table['state']}: bundles -> nodes "
        f"{ {i: n[:8] for i, n in table['bundles_to_node_id'].items()} }"
    )

    env = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "DEMO_BIG": "x" * 4096}}
    workers = []
    for rank in range(WORLD):
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=rank)
        workers.append(
            ray.remote(RayWorkerProc)
            .options(
                name=f"vllm_Worker_demo_TP{rank}", num_cpus=0, num_gpus=1, scheduling_strategy=strategy, runtime_env=env
            )
            .remote(rank=rank, distributed_init_method=f"tcp://{ip}:29500")
        )
    ids = ray.get([w.get_node_and_gpu_ids.remote() for w in workers])
    order = sorted(range(WORLD), key=lambda r: (ids[r][0], ids[r][1]))
    node_gpus = sorted(g for _, gs in ids for g in gs)
    say(f"{WORLD} workers up; (node, GPU ids) by rank: {[(n[:8], g) for n, g in ids]}")
    pids = ray.get(
        [
            workers[r].initialize_worker.remote(
                i, {"CUDA_VISIBLE_DEVICES": ",".join(map(str, node_gpus))}, {"DEMO_DRIVER": "1"}
            )
            for i, r in enumerate(order)
        ]
    )
    say(f"initialised; worker pids {pids}")
    say(f"wait_for_init: {ray.get([w.wait_for_init.remote() for w in workers])}")
    run_refs = [w.run.remote() for w in workers]
    ref_to_rank = {ref: rank for rank, ref in enumerate(run_refs)}
    failed = threading.Event()

    def monitor():
        while ray.is_initialized() and not failed.is_set():
            try:
                done, _ = ray.wait(run_refs, num_returns=1, timeout=5.0)
            except Exception:
                return
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    say(f"monitor: worker rank {ref_to_rank[ref]} died: {type(e).__name__}: {e}")
                failed.set()

    t = threading.Thread(target=monitor, daemon=True)
    t.start()
    time.sleep(0.5)
    say(f"all {WORLD} run() calls running; killing rank 1 (pid {pids[order.index(1)]})")
    killed_at = time.monotonic()
    ray.kill(workers[1])
    assert failed.wait(10), "the monitor did not notice"
    say(f"monitor noticed the death after {1000 * (time.monotonic() - killed_at):.0f} ms")
    t.join(10)
    for w in workers:
        ray.kill(w)
    ray.shutdown()
    say("shut down: every worker stopped, placement group released")
    return 0


if __name__ == "__main__":
    sys.exit(main())
