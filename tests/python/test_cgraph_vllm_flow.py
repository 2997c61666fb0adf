# SPDX-License-Identifier: Apache-2.0
"""vLLM's V1 RayDistributedExecutor on a real beamd with 4 pretend GPUs,
PP=2 x TP=2 (shared/reference/vllm-ray-contract.md §3.6, §4.3): the
cgraph installation checks, a placement group, one wrapper actor per bundle
(num_cpus=0, num_gpus=1, the NOSET env), discovery and rank sorting,
collective_rpc set-up (a gloo group standing for vLLM's process groups),
then the compiled graph built line for line as vLLM builds it (setdefault
RAY_CGRAPH_get_timeout, InputNode, execute_model_ray.bind per stage,
with_tensor_transport on the first stage, register_accelerator_context with
a communicator shaped like RayPPCommunicator, MultiOutputNode,
experimental_compile(enable_asyncio=False, _overlap_gpu_communication=...)),
50 steps with up to PP executions in flight read through refs[0].get(),
FutureWrapper-style ray.get and ray.get(refs), ordinary calls alongside, and
vLLM's shutdown (teardown, ray.kill each worker) leaving no process."""

import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from beamkit.gloo import NEEDS_TORCH, GlooComm
from beamkit.procs import beam_processes, wait_until

pytestmark = NEEDS_TORCH

PP, TP = 2, 2
WORLD = PP * TP
HIDDEN = 64
STEPS = 50


@dataclass
class SchedulerOutput:
    step: int
    req_ids: list
    num_tokens: int


@dataclass
class IntermediateTensors:
    tensors: dict = field(default_factory=dict)


class RayWorkerWrapper:
    """Shaped like vLLM's RayWorkerWrapper: rpc_rank, execute_method,
    execute_model_ray that sets the device once on the graph's thread."""

    def __init__(self, rpc_rank=0):
        self.rpc_rank = rpc_rank
        self.rank = None
        self.compiled_dag_cuda_device_set = False
        self.graph_threads = set()
        self.steps = 0

    def get_node_ip(self):
        import ray

        return ray.util.get_node_ip_address()

    def get_node_and_gpu_ids(self):
        import ray

        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ctx.get_accelerator_ids()["GPU"]

    def adjust_rank(self, rank_mapping):
        self.rpc_rank = rank_mapping.get(self.rpc_rank, self.rpc_rank)

    def update_environment_variables(self, envs_list):
        os.environ.update(envs_list[self.rpc_rank])

    def execute_method(self, method, *args, **kwargs):
        return getattr(self, method)(*args, **kwargs)

    def init_worker(self, all_kwargs):
        kw = all_kwargs[self.rpc_rank]
        self.rank = kw["rank"]
        self.pp_rank, self.tp_rank = divmod(self.rank, TP)

    def init_device(self, init_method):
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=init_method, rank=self.rank, world_size=WORLD)

    def load_model(self):
        import torch

        g = torch.Generator().manual_seed(1234 + self.pp_rank)
        self.weight = torch.randn(HIDDEN, HIDDEN, generator=g) / HIDDEN**0.5

    def setup_device_if_necessary(self):
        if not self.compiled_dag_cuda_device_set:
            self.device_thread = threading.current_thread().name
            self.compiled_dag_cuda_device_set = True

    def execute_model_ray(self, execute_model_input):
        import torch

        self.setup_device_if_necessary()
        self.graph_threads.add(threading.current_thread().name)
        self.steps += 1
        if len(execute_model_input) == 3:
            scheduler_output, grammar_output, intermediate = execute_model_input
        else:
            scheduler_output, grammar_output = execute_model_input
            intermediate = None
        so = scheduler_output
        if self.pp_rank == 0:
            g = torch.Generator().manual_seed(so.step)
            x = torch.randn(so.num_tokens, HIDDEN, generator=g)
            hidden = x @ self.weight
            return scheduler_output, grammar_output, IntermediateTensors({"hidden_states": hidden, "residual": x})
        hidden = intermediate.tensors["hidden_states"] @ self.weight + intermediate.tensors["residual"]
        tokens = hidden.argmax(dim=-1).tolist()
        return {"req_ids": so.req_ids, "sampled_token_ids": tokens, "tp_rank": self.tp_rank, "step": so.step}

    def stats(self):
        return {
            "steps": self.steps,
            "graph_threads": sorted(self.graph_threads),
            "device_thread": getattr(self, "device_thread", None),
            "pid": os.getpid(),
        }


def reference_tokens(step, num_tokens):
    import torch

    w = [
        torch.randn(HIDDEN, HIDDEN, generator=torch.Generator().manual_seed(1234 + p)) / HIDDEN**0.5 for p in range(PP)
    ]
    x = torch.randn(num_tokens, HIDDEN, generator=torch.Generator().manual_seed(step))
    return ((x @ w[0]) @ w[1] + x).argmax(dim=-1).tolist()


class FutureWrapper(Future):
    """vLLM's: result(timeout) is ray.get(ref_or_refs, timeout=timeout)."""

    def __init__(self, ref_or_refs):
        super().__init__()
        self.ref_or_refs = ref_or_refs

    def result(self, timeout=None):
        import ray

        return ray.get(self.ref_or_refs, timeout=timeout)


def check_ray_cgraph_installation():
    import importlib.metadata

    version = tuple(int(p) for p in importlib.metadata.version("ray").split(".")[:3])
    assert version >= (2, 43, 0)
    assert importlib.util.find_spec("ray.experimental.compiled_dag_ref") is not None


def compiled_ray_dag(pp_tp_workers, channel_type="auto"):
    os.environ.setdefault("RAY_CGRAPH_get_timeout", "300")
    from ray.dag import InputNode, MultiOutputNode

    with InputNode() as input_data:
        outputs = [input_data for _ in pp_tp_workers[0]]
        for pp_rank, tp_group in enumerate(pp_tp_workers):
            outputs = [worker.execute_model_ray.bind(outputs[i]) for i, worker in enumerate(tp_group)]
            last_pp_rank = len(pp_tp_workers) - 1
            if pp_rank < last_pp_rank and channel_type != "shm":
                outputs = [output.with_tensor_transport(transport=channel_type) for output in outputs]
        forward_dag = MultiOutputNode(outputs)

    from ray.experimental.channel.accelerator_context import register_accelerator_context

    register_accelerator_context(torch_module_name="cuda", communicator_cls=GlooComm)
    return forward_dag.experimental_compile(enable_asyncio=False, _overlap_gpu_communication=False)


def test_ray_distributed_executor_v1_flow(beamd, monkeypatch, tmp_path):
    import ray
    from ray.experimental.channel import accelerator_context
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    check_ray_cgraph_installation()
    # vLLM's setdefault must not leak into later tests: monkeypatch puts the
    # variable back (removes it) when the test ends
    monkeypatch.setenv("RAY_CGRAPH_get_timeout", "300")
    if not ray.is_initialized():
        ray.init()
    ip = ray.util.get_node_ip_address()
    specs = [{"GPU": 1.0} for _ in range(WORLD)]
    specs[0][f"node:{ip}"] = 0.001
    pg = placement_group(specs, strategy="PACK")
    ray.get(pg.ready(), timeout=30)

    env = {
        "env_vars": {
            "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
        }
    }
    workers = []
    for bundle_id in range(WORLD):
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_capture_child_tasks=True, placement_group_bundle_index=bundle_id
        )
        workers.append(
            ray.remote(num_cpus=0, num_gpus=1, scheduling_strategy=strategy, runtime_env=env)(RayWorkerWrapper).remote(
                rpc_rank=bundle_id
            )
        )
    ips = ray.get([w.get_node_ip.remote() for w in workers], timeout=60)
    order = sorted(range(WORLD), key=lambda i: (ips[i] != ip, ips[i]))
    workers = [workers[i] for i in order]
    ray.get([w.adjust_rank.remote({order[r]: r for r in range(WORLD)}) for w in workers])
    node_gpus = [ray.get(w.get_node_and_gpu_ids.remote()) for w in workers]
    all_gpus = sorted(int(g) for _, gs in node_gpus for g in gs)
    assert all_gpus == list(range(WORLD))

    def collective_rpc(method, args=(), non_block=False):
        refs = [w.execute_method.remote(method, *args) for w in workers]
        return FutureWrapper(refs) if non_block else ray.get(refs, timeout=60)

    collective_rpc(
        "update_environment_variables",
        ([{"CUDA_VISIBLE_DEVICES": ",".join(map(str, all_gpus))} for _ in range(WORLD)],),
    )
    collective_rpc("init_worker", ([{"rank": r} for r in range(WORLD)],))
    collective_rpc("init_device", (f"file://{tmp_path}/gloo-rendezvous",))  # no port to lose to a race
    collective_rpc("load_model")

    pp_tp_workers = [workers[p * TP : (p + 1) * TP] for p in range(PP)]
    try:
        forward_dag = compiled_ray_dag(pp_tp_workers)
    finally:
        accelerator_context._global_custom_context = None
    # (that the variable is read when ray.dag is imported is tested in a fresh
    # process in test_cgraph_api.py; here ray.dag may have been imported already)
    assert os.environ["RAY_CGRAPH_get_timeout"] == "300"

    # the busy loop: up to PP batches in flight, each read through refs[0]
    # (no KV connector: FutureWrapper(refs[0])), every 5th through ray.get(refs)
    in_flight = []
    done = 0
    for step in range(STEPS):
        n = 3 + step % 5
        so = SchedulerOutput(step=step, req_ids=[f"r{step}-{i}" for i in range(n)], num_tokens=n)
        refs = forward_dag.execute((so, None))
        assert len(refs) == TP
        in_flight.append((so, FutureWrapper(refs if step % 5 == 0 else refs[0])))
        if step % 7 == 3:  # an ordinary call while the graph is running
            assert len(collective_rpc("stats")) == WORLD
        while len(in_flight) >= PP or (step == STEPS - 1 and in_flight):
            so_done, fut = in_flight.pop(0)
            out = fut.result(timeout=60)
            outs = out if isinstance(out, list) else [out]
            for o in outs:
                assert o["req_ids"] == so_done.req_ids and o["step"] == so_done.step
                assert o["sampled_token_ids"] == reference_tokens(so_done.step, so_done.num_tokens)
            done += 1
    assert done == STEPS

    stats = collective_rpc("stats")
    assert [s["steps"] for s in stats] == [STEPS] * WORLD
    for s in stats:
        assert s["device_thread"] == "cgraph-exec" and s["graph_threads"] == ["cgraph-exec"]

    # the tensors between the stages went through the communicator, not the frames
    def comm_counts():
        comm = ray.get(
            [w.__ray_call__.remote(lambda self: __import__("beamkit.gloo").gloo.COMM_STATS.copy()) for w in workers]
        )
        return [c["sends"] for c in comm[:TP]], [c["recvs"] for c in comm[TP:]]

    # a sender counts once dist.send returns, which may be just after its peer got the tensor
    assert wait_until(lambda: comm_counts() == ([2 * STEPS] * TP, [2 * STEPS] * TP), timeout=30), comm_counts()
    pids = [s["pid"] for s in stats]

    # vLLM's shutdown
    forward_dag.teardown()
    forward_dag.teardown()
    for w in workers:
        ray.kill(w)
    assert wait_until(lambda: not set(pids) & set(beam_processes(beamd.socket)), timeout=30)
