#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""beam compiled-graph benchmark, in one run against one private beamd:

1. Per-step time of ``execute`` + ``refs[0].get()`` for TP=4/PP=1 and
   TP=2/PP=2 graphs of no-op workers, next to one sync actor call
   (``ray.get(a.m.remote())``) measured in the same run; printed as ratios
   (goal: a TP=4 step <= 3x one sync call).
2. Bytes/s of one intermediate tensor (4 MiB and 64 MiB, float32) crossing
   a PP=2 graph: the default path (the tensor rides out of band in the
   frame on the direct socket) against a registered gloo communicator
   (only metadata in the frame; the tensor goes through dist.send/recv).

    source build/env.sh && $BEAM_PYTHON bench/bench_cgraph.py [--quick]

``--gpu`` (only where a GPU is at hand) instead runs the GPU check: a
2-stage graph between two actors sharing one GPU (num_gpus=0.5 each; NCCL
refuses two ranks on one device, so the default path), moving a 64 MiB CUDA
tensor between the stages; it checks that the tensor arrives on the GPU
intact and prints the bytes/s.
"""

import argparse
import os
import statistics
import sys
import time

import ray

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))

from beamkit.procs import free_port  # noqa: E402


class NoOp:
    def __init__(self, rank=0):
        self.rank = rank

    def step(self, x):
        return x

    def call(self, x=None):
        return x

    def init_dist(self, rank, world, init_method):
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
        return rank

    def make(self, step):
        import torch

        nbytes, seed = step
        return {"hidden": torch.full((nbytes // 4,), float(seed))}

    def make_cuda(self, step):
        import torch

        nbytes, seed = step
        g = torch.Generator(device="cuda").manual_seed(seed)
        t = torch.randn(nbytes // 4, device="cuda", generator=g)
        return {"hidden": t, "sum": float(t.double().sum())}

    def take_cuda(self, inter):
        t = inter["hidden"]
        return (t.is_cuda, t.numel() * t.element_size(), float(t.double().sum()) == inter["sum"])

    def take(self, inter):
        t = inter["hidden"]
        return (t.numel() * t.element_size(), float(t[0]), float(t[-1]))


def _timed(fn, n, repeats=5):
    """Median per-call seconds over `repeats` runs of n calls."""
    fn()
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n)
    return statistics.median(runs)


def _graph(workers_by_stage):
    from ray.dag import InputNode, MultiOutputNode

    with InputNode() as inp:
        outs = [inp for _ in workers_by_stage[0]]
        for stage in workers_by_stage:
            outs = [w.step.bind(outs[i]) for i, w in enumerate(stage)]
        return MultiOutputNode(outs).experimental_compile()


def bench_steps(n, rounds=7):
    """Rounds of (sync calls, TP=4 steps, TP=2/PP=2 steps), interleaved so
    that load from elsewhere on the machine falls on all three alike; the
    median per-call time of each over the rounds."""
    cls = ray.remote(num_cpus=0)(NoOp)
    ws = [cls.remote(i) for i in range(8)]
    ray.get([w.call.remote() for w in ws])
    tp4 = _graph([ws[:4]])
    pp2 = _graph([ws[4:6], ws[6:8]])
    small = ("scheduler_output", list(range(16)))
    work = {
        "sync actor call": lambda: ray.get(ws[0].call.remote(1)),
        "TP=4/PP=1 step": lambda: tp4.execute(small)[0].get(),
        "TP=2/PP=2 step": lambda: pp2.execute(small)[0].get(),
    }
    runs = {name: [] for name in work}
    for fn in work.values():
        for _ in range(50):
            fn()
    for _ in range(rounds):
        for name, fn in work.items():
            t = time.perf_counter()
            for _ in range(n):
                fn()
            runs[name].append((time.perf_counter() - t) / n)
    tp4.teardown()
    pp2.teardown()
    for w in ws:
        ray.kill(w)
    return {name: statistics.median(r) for name, r in runs.items()}


def bench_tensors(sizes, n):
    from beamkit.gloo import GlooComm
    from ray.dag import InputNode, MultiOutputNode
    from ray.experimental.channel import accelerator_context

    env = {"env_vars": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}}
    cls = ray.remote(num_cpus=0, runtime_env=env)(NoOp)
    out = {}
    for path in ("default", "communicator"):
        ws = [cls.remote(i) for i in range(2)]
        ray.get([w.call.remote() for w in ws])
        if path == "communicator":
            init = f"tcp://127.0.0.1:{free_port()}"
            ray.get([w.init_dist.remote(i, 2, init) for i, w in enumerate(ws)])
            accelerator_context.register_accelerator_context(torch_module_name="cuda", communicator_cls=GlooComm)
        try:
            with InputNode() as inp:
                mid = ws[0].make.bind(inp).with_tensor_transport(transport="auto")
                dag = MultiOutputNode([ws[1].take.bind(mid)]).experimental_compile()
        finally:
            accelerator_context._global_custom_context = None
        for size in sizes:
            got = dag.execute((size, 1))[0].get()
            assert got == (size, 1.0, 1.0), got
            per = _timed(lambda: dag.execute((size, 2))[0].get(), max(2, n // (size >> 20 or 1)), repeats=3)
            out[(path, size)] = size / per
        dag.teardown()
        for w in ws:
            ray.kill(w)
    return out


def gpu_check():
    import torch

    from ray.dag import InputNode, MultiOutputNode

    if not torch.cuda.is_available():
        print("no CUDA device here: the GPU check needs one")
        return 1
    ray.init(num_gpus=1)
    cls = ray.remote(num_cpus=0, num_gpus=0.5)(NoOp)
    ws = [cls.remote(i) for i in range(2)]
    with InputNode() as inp:
        mid = ws[0].make_cuda.bind(inp).with_tensor_transport(transport="auto")
        dag = MultiOutputNode([ws[1].take_cuda.bind(mid)]).experimental_compile()
    size = 64 << 20
    on_gpu, nbytes, intact = dag.execute((size, 0))[0].get(timeout=120)
    print(f"64 MiB CUDA tensor between two stages on one GPU: on the GPU {on_gpu}, {nbytes} bytes, intact {intact}")
    per = _timed(lambda: dag.execute((size, 1))[0].get(timeout=120), 10, repeats=3)
    print(f"  {size / per / 1e9:.2f} GB/s (execute + get, tensor made on stage 0 each step)")
    dag.teardown()
    ray.shutdown()
    return 0 if (on_gpu and nbytes == size and intact) else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--gpu", action="store_true", help="the GPU check (needs a CUDA device)")
    args = p.parse_args()
    if args.gpu:
        sys.exit(gpu_check())
    ray.init(num_cpus=8, num_gpus=0)
    n = 200 if args.quick else 1000
    steps = bench_steps(n)
    sync = steps["sync actor call"]
    print("per-step time of execute + refs[0].get() (no-op workers), and one sync actor call, one run:")
    for name, t in steps.items():
        print(f"  {name:18s} {t * 1e6:8.1f} us   {t / sync:5.2f}x sync call")
    verdict = "meets" if steps["TP=4/PP=1 step"] <= 3 * sync else "misses"
    print(f"  goal TP=4 step <= 3x sync call: {verdict}")
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: no tensor figures")
        return
    sizes = [4 << 20, 64 << 20]
    rates = bench_tensors(sizes, 20 if args.quick else 64)
    print("one float32 tensor between two stages (execute + get of a PP=2 graph), bytes/s:")
    for size in sizes:
        d, c = rates[("default", size)], rates[("communicator", size)]
        print(
            f"  {size >> 20:3d} MiB   default path {d / 1e9:6.2f} GB/s   gloo communicator {c / 1e9:6.2f} GB/s"
            f"   default/communicator {d / c:4.2f}"
        )
    ray.shutdown()


if __name__ == "__main__":
    main()
