# SPDX-License-Identifier: Apache-2.0
"""vLLM's RayExecutorV2 lifecycle on a real beamd with 4 pretend GPUs
(shared/reference/vllm-ray-contract.md §4.2): init only if needed, a
placement group for the world, one named GPU actor per bundle with a large
runtime_env, discovery, a never-returning run() per worker watched from a
background thread with ray.wait(..., num_returns=1, timeout=5.0), one worker
killed and noticed, then shutdown with no worker left."""

import os
import threading
import time

from beamkit.procs import beam_processes, wait_gone, wait_until

WORLD = 4


class RayWorkerProc:
    """Shaped like vLLM's worker: a light constructor, discovery, init, run()."""

    def __init__(self, vllm_config, rank, distributed_init_method, is_driver_worker):
        self.config = vllm_config
        self.rank = rank

    def get_node_and_gpu_ids(self):
        import ray

        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), [int(x) for x in ctx.get_accelerator_ids()["GPU"]]

    def get_node_ip(self):
        import ray

        return ray.util.get_node_ip_address()

    def initialize_worker(self, local_rank, env, driver_env_vars):
        for k, v in driver_env_vars.items():
            os.environ.setdefault(k, v)
        os.environ.update(env)
        self.local_rank = local_rank
        return os.getpid(), os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("BIG_VAR_0", "")[:4]

    def wait_for_init(self):
        return {"status": "READY", "handle": ("mq", self.rank)}

    def run(self):
        while True:
            time.sleep(0.05)


def test_ray_executor_v2_lifecycle(beamd):
    import ray
    from ray.util import placement_group_table
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if not ray.is_initialized():
        ray.init(runtime_env=None)
    ip = ray.util.get_node_ip_address()
    specs = [{"GPU": 1.0} for _ in range(WORLD)]
    specs[0][f"node:{ip}"] = 0.001
    pg = placement_group(specs, strategy="PACK")
    ready, _ = ray.wait([pg.ready()], timeout=10)
    assert ready
    table = placement_group_table(pg)
    assert set(table["bundles_to_node_id"]) == set(range(WORLD))

    big_env = {f"BIG_VAR_{i}": "v" * 2000 for i in range(40)}  # ~80 KB of environment
    runtime_env = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", **big_env}}
    config = {"model": "m" * 1000, "tp": WORLD, "nested": {"layers": list(range(500))}}
    workers = []
    for rank in range(WORLD):
        ss = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=rank)
        workers.append(
            ray.remote(RayWorkerProc)
            .options(
                name=f"vllm_Worker_test_TP{rank}",
                num_cpus=0,
                num_gpus=1,
                scheduling_strategy=ss,
                runtime_env=runtime_env,
            )
            .remote(
                vllm_config=config, rank=rank, distributed_init_method=f"tcp://{ip}:1234", is_driver_worker=rank == 0
            )
        )

    ids = ray.get([w.get_node_and_gpu_ids.remote() for w in workers])
    ips = ray.get([w.get_node_ip.remote() for w in workers])
    node_ids = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    assert {n for n, _ in ids} == {ray.get_runtime_context().get_node_id()}
    assert all(node_ids[n] == a == ip for (n, _), a in zip(ids, ips))
    gpus = sorted(g for _, gs in ids for g in gs)
    assert gpus == [0, 1, 2, 3]  # distinct GPU per worker
    assert all(table["bundles_to_node_id"][r] == ids[r][0] for r in range(WORLD))

    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    inits = ray.get([w.initialize_worker.remote(r, env, {"DRIVER_ONLY": "1"}) for r, w in enumerate(workers)])
    assert [cvd for _, cvd, _ in inits] == ["0,1,2,3"] * WORLD
    assert all(big == "vvvv" for _, _, big in inits)
    pids = [pid for pid, _, _ in inits]
    assert all(r["status"] == "READY" for r in ray.get([w.wait_for_init.remote() for w in workers]))

    run_refs = [w.run.remote() for w in workers]
    ref_to_rank = {ref: rank for rank, ref in enumerate(run_refs)}
    seen = []
    stop = threading.Event()

    def monitor():
        while ray.is_initialized() and not stop.is_set():
            try:
                done, _ = ray.wait(run_refs, num_returns=1, timeout=5.0)
            except Exception:
                return
            if done:
                seen.extend(ref_to_rank[r] for r in done)
                return

    t = threading.Thread(target=monitor, daemon=True)
    t.start()
    time.sleep(0.3)
    assert not seen  # run() never returns on its own
    ray.kill(workers[2])
    assert wait_until(lambda: seen == [2], timeout=8)
    t.join(5)
    try:
        ray.get(run_refs[2], timeout=5)
        raise AssertionError("a killed worker's run() returned")
    except ray.exceptions.RayActorError:
        pass
    # the others are still running
    done, rest = ray.wait([r for i, r in enumerate(run_refs) if i != 2], timeout=0.2)
    assert done == [] and len(rest) == WORLD - 1
    stop.set()
    for w in workers:
        try:
            ray.kill(w)
        except Exception:
            pass
    ray.shutdown()
    assert wait_until(lambda: beam_processes(beamd.socket) == [], timeout=10)
    assert wait_gone(pids, timeout=10)
