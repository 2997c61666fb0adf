#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""beam core benchmark: each workload on beam next to the same workload over
multiprocessing.Pipe to one subprocess, measured in one run, printed as
ratios (beam time / Pipe time; lower is better, 1.0 is parity).

    source build/env.sh && $BEAM_PYTHON bench/bench_core.py [--quick]

Workloads: sync actor calls (call, wait, repeat); 1000 calls in flight on
one actor, then wait for all; put + get of a small object; ray.init plus 4
actors ready (against starting 4 subprocesses and a round trip with each).

For the sync calls it also prints the CPU time each process spent per call
(all its threads, user + kernel, from /proc/PID/task/*/schedstat): less
swayed by the machine's other load than the wall time, and it says where a
call's cost goes (driver, beamd, worker; against the Pipe's two ends).
Run it under `taskset -c N` to see the CPU cost without cross-CPU wake-ups.
"""

import argparse
import os
import statistics
import sys

import benchutil
from benchutil import PipeActor, timed

import ray

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from beamkit.procs import cpu_ns  # noqa: E402

Counter = ray.remote(benchutil.Counter)


def cpu_per_call(fn, pids, ops, repeat):
    """The median over repeat runs of fn() of each pid's CPU time per op, in us."""
    runs = []
    for _ in range(repeat):
        before = [cpu_ns(p) for p in pids]
        fn()
        after = [cpu_ns(p) for p in pids]
        runs.append([None if a is None or b is None else (b - a) / ops / 1000 for a, b in zip(before, after)])
    return [
        None if any(r[i] is None for r in runs) else statistics.median(r[i] for r in runs) for i in range(len(pids))
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    args = ap.parse_args()
    n_sync = 200 if args.quick else 2000
    repeat = 3 if args.quick else 5

    ray.init(log_to_driver=False, num_gpus=0)
    actor = Counter.remote()
    ray.get(actor.add.remote(0))
    pipe = PipeActor()
    pipe.call("add", 0)
    rows = []

    def beam_sync():
        for _ in range(n_sync):
            ray.get(actor.add.remote(1))

    def pipe_sync():
        for _ in range(n_sync):
            pipe.call("add", 1)

    rows.append(("sync actor call", n_sync, timed(beam_sync, repeat), timed(pipe_sync, repeat)))
    from ray._private import worker as _rt

    private = _rt.runtime().private
    beamd_pid = private.proc.pid if private is not None else None
    worker_pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    beam_cpu = cpu_per_call(beam_sync, [os.getpid(), beamd_pid, worker_pid], n_sync, repeat)
    pipe_cpu = cpu_per_call(pipe_sync, [os.getpid(), pipe.proc.pid], n_sync, repeat)

    def beam_inflight():
        ray.get([actor.add.remote(1) for _ in range(1000)])

    def pipe_inflight():
        pipe.in_flight(1000)

    rows.append(("1000 calls in flight", 1000, timed(beam_inflight, repeat), timed(pipe_inflight, repeat)))

    small = {"k": list(range(16)), "s": "x" * 100}

    def beam_putget():
        for _ in range(n_sync):
            ray.get(ray.put(small))

    def pipe_putget():
        for _ in range(n_sync):
            pipe.call("put", small)
            pipe.call("get", None)

    rows.append(("put + get small object", n_sync, timed(beam_putget, repeat), timed(pipe_putget, repeat)))
    pipe.close()
    ray.shutdown()

    def beam_start():
        ray.init(log_to_driver=False, num_gpus=0)
        actors = [Counter.remote() for _ in range(4)]
        ray.get([a.__ray_ready__.remote() for a in actors])
        ray.shutdown()

    def pipe_start():
        ps = [PipeActor() for _ in range(4)]
        for p in ps:
            p.call("add", 0)
        for p in ps:
            p.close()

    rows.append(("ray.init + 4 actors ready", 1, timed(beam_start, repeat), timed(pipe_start, repeat)))

    print(
        f"beam core benchmark ({'quick' if args.quick else 'full'}; median of {repeat}; "
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus)"
    )
    print(f"{'workload':28} {'ops':>6} {'beam/op':>11} {'pipe/op':>11} {'beam/pipe':>10}")
    for name, ops, b, p in rows:
        print(f"{name:28} {ops:>6} {1e6 * b / ops:>9.1f}us {1e6 * p / ops:>9.1f}us {b / p:>10.2f}")

    def us(v):
        return "?" if v is None else f"{v:.1f}us"

    known = [v for v in beam_cpu if v is not None]
    print(
        f"sync actor call, CPU per call: beam {us(sum(known))} (driver {us(beam_cpu[0])}, beamd "
        f"{us(beam_cpu[1])}, worker {us(beam_cpu[2])}); pipe {us(sum(v for v in pipe_cpu if v is not None))} "
        f"(caller {us(pipe_cpu[0])}, server {us(pipe_cpu[1])})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
