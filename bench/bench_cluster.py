#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""beam cluster benchmark: actor calls that cross nodes next to calls that
stay on one, measured in one run on one machine (a head on 127.0.0.1 and a
member on 127.0.0.2, as beamkit.daemon.Cluster in tests/python makes them), and
printed as ratios to the same-node case (lower is better, 1.0 is parity).

    source build/env.sh && $BEAM_PYTHON bench/bench_cluster.py [--quick] [--json]

Cases (driver node -> actor node):
  head->head      the baseline: one daemon, no TCP
  head->member    one link hop each way (driver's daemon is the head)
  member->head    one link hop each way (the member relays its driver)
  member->member  driver and actor on the same member: the member runs the
                  call itself (docs/DESIGN.md, "Calls that stay on a member");
                  printed again as "member-local / head-local sync call"

Workloads, each in a fresh driver process per case, the cases interleaved
round by round and the median round kept:
  sync       call and ray.get, one at a time (latency per call)
  pipelined  1000 calls in flight on one actor, then ray.get of all (calls/s)

With --cpu, the CPU time each process spent per sync call (all its threads,
user + kernel, from /proc/PID/task/*/schedstat, median round) is printed for
the head->head and member->member cases: the head's beamd, the member's
beamd, the driver and the worker.

Loopback has no wire latency, so the cross-node cost shown here is the
daemons' relaying (encode, TCP, decode, dispatch on the head), not a network.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
KIT = os.path.abspath(os.path.join(HERE, "..", "tests", "python"))
sys.path.insert(0, KIT)

from beamkit.daemon import Cluster  # noqa: E402

DRIVER = textwrap.dedent("""
    import json, os, sys, time
    import ray
    ray.init()

    sys.path.insert(0, %(kit)r)
    from beamkit.procs import cpu_ns

    @ray.remote(num_cpus=0)
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

        def pid(self):
            return os.getpid()

    sync_n, pipe_n, warm = %(sync_n)d, %(pipe_n)d, %(warm)d
    a = Counter.options(resources={"node:%(actor_ip)s": 0.001}).remote()
    for _ in range(warm):
        ray.get(a.add.remote(1))
    pids = [int(p) for p in os.environ["BENCH_DAEMON_PIDS"].split(",")] + [os.getpid(), ray.get(a.pid.remote())]
    cpu0 = [cpu_ns(p) or 0 for p in pids]
    t = time.perf_counter()
    for _ in range(sync_n):
        ray.get(a.add.remote(1))
    sync_us = (time.perf_counter() - t) / sync_n * 1e6
    cpu_us = [((cpu_ns(p) or 0) - c) / sync_n / 1000 for p, c in zip(pids, cpu0)]
    ray.get([a.add.remote(1) for _ in range(pipe_n)])  # warm the pipeline
    t = time.perf_counter()
    refs = [a.add.remote(1) for _ in range(pipe_n)]
    ray.get(refs)
    pipe_s = time.perf_counter() - t
    print(json.dumps({"sync_us": sync_us, "pipe_calls_per_s": pipe_n / pipe_s, "cpu_us": cpu_us}))
""")

CASES = [
    ("head->head", "head", "127.0.0.1"),
    ("head->member", "head", "127.0.0.2"),
    ("member->head", "member", "127.0.0.1"),
    ("member->member", "member", "127.0.0.2"),
]


def run_case(c, driver_on, actor_ip, sync_n, pipe_n, warm):
    node = c.head if driver_on == "head" else c.members[0]
    env = dict(
        os.environ,
        BEAM_SOCKET=node.socket,
        RAY_ADDRESS=node.socket,
        BENCH_DAEMON_PIDS=f"{c.head.pid},{c.members[0].pid}",
    )
    code = DRIVER % {"sync_n": sync_n, "pipe_n": pipe_n, "warm": warm, "actor_ip": actor_ip, "kit": KIT}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"driver failed ({driver_on} -> {actor_ip}):\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of every case (median kept)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ap.add_argument("--cpu", action="store_true", help="print each process's CPU per sync call too")
    args = ap.parse_args()
    if not os.environ.get("BEAM_BEAMD"):
        raise SystemExit("source build/env.sh first (BEAM_BEAMD, BEAM_BEAMCTL, PYTHONPATH)")
    sync_n, pipe_n, warm = (200, 1000, 20) if args.quick else (2000, 1000, 200)
    rounds = args.rounds or (2 if args.quick else 5)
    results = {name: [] for name, _, _ in CASES}
    # quiet daemons: the benchmark measures relaying, not debug logging
    c = Cluster(members=1, cpus=4, gpus=0, log_level="warn")
    try:
        for _ in range(rounds):
            for name, driver_on, actor_ip in CASES:
                results[name].append(run_case(c, driver_on, actor_ip, sync_n, pipe_n, warm))
    finally:
        c.close()

    figures = {}
    for name in results:
        figures[name] = {
            "sync_us": statistics.median(r["sync_us"] for r in results[name]),
            "pipe_calls_per_s": statistics.median(r["pipe_calls_per_s"] for r in results[name]),
            "cpu_us": [statistics.median(r["cpu_us"][i] for r in results[name]) for i in range(4)],
        }
    base = figures["head->head"]
    print(
        f"beam cluster benchmark: {rounds} rounds, {sync_n} sync calls and {pipe_n} in flight per round, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"{'case':<16} {'sync us/call':>13} {'x same-node':>12} {'pipelined calls/s':>18} {'x same-node':>12}")
    for name, f in figures.items():
        print(
            f"{name:<16} {f['sync_us']:>13.1f} {f['sync_us'] / base['sync_us']:>12.2f} "
            f"{f['pipe_calls_per_s']:>18.0f} {base['pipe_calls_per_s'] / f['pipe_calls_per_s']:>12.2f}"
        )
    print("(x same-node: time per call relative to head->head; above 1.0 is slower)")
    # a driver on a member calling an actor on that same member, against a
    # driver on the head calling an actor on the head (issue 14's goal: <= 1.15)
    print(f"member-local / head-local sync call: " f"{figures['member->member']['sync_us'] / base['sync_us']:.2f}")
    if args.cpu:
        print("CPU per sync call, us (head beamd, member beamd, driver, worker; median round):")
        for name in ("head->head", "member->member"):
            cpu = figures[name]["cpu_us"]
            print(
                f"  {name:<16} head {cpu[0]:5.1f}  member {cpu[1]:5.1f}  driver {cpu[2]:5.1f}  "
                f"worker {cpu[3]:5.1f}  all {sum(cpu):6.1f}"
            )
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
