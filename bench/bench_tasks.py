#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The per-call overhead of a remote function (a task) against a sync actor
call, measured in one run and printed as ratios (task time / actor call
time; lower is better).

    source build/env.sh && $BEAM_PYTHON bench/bench_tasks.py [--n N] [--cpus C]
    env -u PYTHONPATH /opt/ray-venv/bin/python bench/bench_tasks.py   # real Ray

Workloads, each N calls of a function that returns its argument:
- sequential: `ray.get(f.remote(i))`, one at a time;
- in flight: N `f.remote(i)` submitted, then one `ray.get` of them all;
- actor: `ray.get(a.echo.remote(i))`, one at a time, on one live actor (the
  baseline the ratios divide by).
Per-call times are medians of --repeat rounds.
"""

import argparse
import os

from benchutil import init_ray, timed

import ray


@ray.remote
def echo(x):
    return x


@ray.remote
class Echo:
    def echo(self, x):
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50, help="calls per round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    n = args.n
    system = init_ray(args.cpus)
    try:
        a = Echo.remote()
        ray.get(a.echo.remote(0))
        ray.get(echo.remote(0))  # warm: imports, the function's pickle

        actor = timed(lambda: [ray.get(a.echo.remote(i)) for i in range(n)], args.repeat) / n
        seq = timed(lambda: [ray.get(echo.remote(i)) for i in range(n)], args.repeat) / n
        flight = timed(lambda: ray.get([echo.remote(i) for i in range(n)]), args.repeat) / n
    finally:
        ray.shutdown()
    print(f"{system}, {args.cpus} CPUs, {n} calls x {args.repeat} rounds (per call, median round)")
    print(f"  sync actor call       {actor * 1e3:9.3f} ms   1.00")
    print(f"  task, sequential      {seq * 1e3:9.3f} ms   {seq / actor:6.2f} x actor call")
    print(f"  task, {n} in flight  {flight * 1e3:9.3f} ms   {flight / actor:6.2f} x actor call")


if __name__ == "__main__":
    main()
