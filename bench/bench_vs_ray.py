#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""beam against real Ray and multiprocessing.Pipe: the core workloads in one
run, each side in its own process, printed as times and as ratios to Pipe
and beam/Ray (lower is better for beam).

    source build/env.sh && $BEAM_PYTHON bench/bench_vs_ray.py [--quick] [--ray-python PATH]

Ray runs with its own interpreter (default /opt/ray-venv/bin/python, Ray
2.43.0; scripts/test_real_ray.sh makes it) and beam's python/ off its path.
Workloads: one sync actor call (call, wait); 1000 calls in flight on one
actor, then wait for all; put + get of a small object; ray.init + 4 actors
ready; a 4-bundle placement group created, ready, removed. Pipe: the same
round trips to subprocesses (no placement group there).
"""

import argparse
import json
import sys

import benchutil
from benchutil import PipeActor, fmt, side_envs, side_in_subprocess, timed, timed_start

WORKLOADS = ("sync call", "1000 in flight", "put+get small", "init + 4 actors", "4-bundle pg create/remove")


# ---------- one side: beam or Ray, whichever `import ray` finds ----------


def run_side(quick):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    Counter = ray.remote(num_cpus=0)(benchutil.Counter)

    init_kw = {"num_cpus": 8, "num_gpus": 0}
    if getattr(ray, "__commit__", "") != "beam":
        init_kw.update(include_dashboard=False, log_to_driver=False)
    out = {}

    def init_4():
        ray.init(**init_kw)
        actors = [Counter.remote() for _ in range(4)]
        ray.get([a.add.remote(0) for a in actors])
        return actors

    out["init + 4 actors"] = timed_start(init_4, lambda actors: (actors.clear(), ray.shutdown()), 1 if quick else 3)

    ray.init(**init_kw)
    c = Counter.remote()
    ray.get(c.add.remote(1))
    n = 200 if quick else 1000
    for _ in range(50):
        ray.get(c.add.remote(1))
    out["sync call"] = timed(lambda: ray.get(c.add.remote(1)), n)
    out["1000 in flight"] = timed(lambda: ray.get([c.add.remote(1) for _ in range(1000)]), 3 if quick else 10)
    small = {"a": 1, "b": [1, 2, 3], "c": "x" * 100}
    out["put+get small"] = timed(lambda: ray.get(ray.put(small)), n)

    def pg_cycle():
        pg = placement_group([{"CPU": 1}] * 4)
        ray.get(pg.ready())
        remove_placement_group(pg)

    pg_cycle()
    out["4-bundle pg create/remove"] = timed(pg_cycle, 5 if quick else 20)
    ray.shutdown()
    return out


# ---------- multiprocessing.Pipe ----------


def run_pipe(quick):
    out = {}

    def init_4():
        procs = [PipeActor() for _ in range(4)]
        for p in procs:
            p.conn.send(("add", 0))
        for p in procs:
            p.conn.recv()
        return procs

    out["init + 4 actors"] = timed_start(init_4, lambda procs: [p.close() for p in procs], 1 if quick else 3)
    pipe = PipeActor()
    n = 200 if quick else 1000

    call = pipe.call
    out["sync call"] = timed(lambda: call("add", 1), n)

    out["1000 in flight"] = timed(lambda: pipe.in_flight(1000), 3 if quick else 10)
    small = {"a": 1, "b": [1, 2, 3], "c": "x" * 100}
    out["put+get small"] = timed(lambda: (call("put", small), call("get", None)), n)
    pipe.close()
    return out


# ---------- the run ----------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--ray-python", default="/opt/ray-venv/bin/python")
    ap.add_argument("--side", metavar="OUT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        result = run_side(args.quick)
        with open(args.side, "w") as f:
            json.dump(result, f)
        return
    base, ray_env = side_envs()
    extra = ["--quick"] if args.quick else []
    print("beam ...", file=sys.stderr, flush=True)
    beam = side_in_subprocess(__file__, sys.executable, base, extra)
    print("Ray ...", file=sys.stderr, flush=True)
    real = side_in_subprocess(__file__, args.ray_python, ray_env, extra)
    print("Pipe ...", file=sys.stderr, flush=True)
    pipe = run_pipe(args.quick)
    print(
        f"{'workload':28} {'beam':>10} {'Ray 2.43':>10} {'Pipe':>10} {'beam/Ray':>9} {'beam/Pipe':>9} {'Ray/Pipe':>9}"
    )
    for w in WORKLOADS:
        b, r, p = beam[w], real[w], pipe.get(w)
        ratio = lambda x, y: f"{x / y:.2f}" if x and y else "n/a"  # noqa: E731
        print(f"{w:28} {fmt(b):>10} {fmt(r):>10} {fmt(p):>10} {ratio(b, r):>9} {ratio(b, p):>9} {ratio(r, p):>9}")


if __name__ == "__main__":
    main()
