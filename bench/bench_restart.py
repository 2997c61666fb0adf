#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How long an actor restart takes: from the SIGKILL of its process to the
first call answered by the new instance, for an actor with max_restarts=-1,
on beam or on real Ray (the same script under each interpreter).

    source build/env.sh && $BEAM_PYTHON bench/bench_restart.py [--runs N]
    env -u PYTHONPATH RAY_USAGE_STATS_ENABLED=0 /opt/ray-venv/bin/python bench/bench_restart.py

Each run: the actor's pid is read, the process is SIGKILLed, and one call is
made at once; with max_task_retries=-1 it waits for (or is sent again to) the
new instance on both systems, so nothing spins while the actor restarts (a
call that still fails is made again). Prints each run and the median.
"""

import argparse
import os
import signal
import statistics
import time

from benchutil import init_ray

import ray


@ray.remote(max_restarts=-1, max_task_retries=-1)
class Restartable:
    def pid(self):
        return os.getpid()


def restart_time(a, pid):
    t = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    while True:
        try:
            new = ray.get(a.pid.remote(), timeout=120)
        except ray.exceptions.ActorDiedError:
            raise
        except ray.exceptions.RayActorError:
            time.sleep(0.01)
            continue
        if new != pid:
            return time.perf_counter() - t, new


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    system = init_ray(args.cpus)
    try:
        a = Restartable.remote()
        pid = ray.get(a.pid.remote(), timeout=120)
        times = []
        for _ in range(args.runs):
            dt, pid = restart_time(a, pid)
            times.append(dt)
    finally:
        ray.shutdown()
    print(f"{system}: SIGKILL to the first call answered by the restarted actor, {args.runs} runs")
    print("  runs:   " + "  ".join(f"{t * 1e3:.0f} ms" for t in times))
    print(f"  median: {statistics.median(times) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
