#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One large result through beamd: an actor returns SIZE bytes (64 MiB by
default) and the driver ray.get()s it. Prints the get's time (best and
median of REPEAT) and beamd's peak RSS (VmHWM) over the run, above its RSS
before the first call, so a change to beamd's payload path can be measured
before and after on the same machine, in one run each.

    source build/env.sh && $BEAM_PYTHON bench/bench_payload_beamd.py [--mib 64] [--repeat 5]
"""

import argparse
import os
import statistics
import time

import ray


def beamd_pid():
    """The private beamd this driver started (its child named beamd)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if comm == "beamd" and ppid == me:
            return int(name)
    raise RuntimeError("no private beamd found: run without a `ray start` session")


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_hwm(pid):
    # writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0)
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


@ray.remote
class Producer:
    def __init__(self, n):
        self.blob = b"\x5a" * n

    def make(self):
        return self.blob


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.mib << 20
    ray.init(num_cpus=2)
    pid = beamd_pid()
    p = Producer.remote(n)
    small = ray.get(p.make.remote())  # warm-up: the worker and the path
    assert len(small) == n
    del small
    time.sleep(0.3)
    rss0 = status_kib(pid, "VmRSS")
    reset_hwm(pid)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        v = ray.get(p.make.remote())
        times.append(time.perf_counter() - t0)
        assert len(v) == n
        del v
    hwm = status_kib(pid, "VmHWM")
    print(f"{args.mib} MiB result, ray.get of an actor call: best {min(times) * 1e3:.1f} ms, "
          f"median {statistics.median(times) * 1e3:.1f} ms ({args.repeat} runs)")
    print(f"beamd RSS before {rss0 >> 10} MiB, peak during the gets {hwm >> 10} MiB "
          f"(+{(hwm - rss0) >> 10} MiB)")
    ray.shutdown()


if __name__ == "__main__":
    main()
