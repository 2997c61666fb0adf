#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One large value on its path: an actor call returns SIZE bytes (64 MiB by
default) and the driver ray.get()s it. Prints one table: the get's time
(median of the runs, from submit to the value in hand), and the peak RSS of
the driver, of beamd and of the actor's worker during the runs (VmHWM from
/proc/PID/status, after resetting it through /proc/PID/clear_refs), in MiB
as "peak (+ above the RSS before the runs)": the increase is what the value
cost, about one SIZE per copy alive at once; the peak also counts what an
earlier get left allocated.

    source build/env.sh && $BEAM_PYTHON bench/bench_payload.py [--mib 64] [--runs 3]

Rows: `bytes` (the value is pickled in band) and `numpy` (a uint8 array:
its data travels out of band, as Ray's zero-copy get)."""

import argparse
import os
import statistics
import sys
import time

import numpy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))

import ray  # noqa: E402
from beamkit.procs import hwm_kib, reset_hwm, rss_kib  # noqa: E402


@ray.remote
class Source:
    def __init__(self, size):
        self.bytes = os.urandom(1) * size
        self.array = numpy.ones(size, dtype=numpy.uint8)

    def pid(self):
        return os.getpid()

    def value(self, kind):
        return self.bytes if kind == "bytes" else self.array


def _beamd_pid():
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if int(fields[1]) == me and comm == "beamd":
            return int(name)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    size = args.mib << 20

    ray.init(log_to_driver=False, num_gpus=0)  # a private beamd, the driver's child
    beamd = _beamd_pid()
    src = Source.remote(size)
    worker = ray.get(src.pid.remote())
    pids = {"driver": os.getpid(), "beamd": beamd, "worker": worker}
    rows = []
    for kind in ("bytes", "numpy"):
        v = ray.get(src.value.remote(kind))  # warm the path once
        assert len(v) == size
        del v
        base = {}
        for who, pid in pids.items():
            if pid:
                reset_hwm(pid)
                base[who] = rss_kib(pid) / 1024
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            v = ray.get(src.value.remote(kind))
            times.append(time.perf_counter() - t)
            assert len(v) == size
            del v
        peaks = {who: (hwm_kib(pid) / 1024, base[who]) for who, pid in pids.items() if pid}
        rows.append((kind, statistics.median(times), peaks))
    ray.shutdown()

    def cell(p):
        return f"{p[0]:.0f} (+{p[0] - p[1]:.0f})" if p else "-"

    print(f"{args.mib} MiB actor-call result, ray.get, median of {args.runs} runs; peak RSS in MiB (+ above start)")
    print(f"{'value':8} {'get ms':>8} {'MiB/s':>6} {'driver':>14} {'beamd':>14} {'worker':>14}")
    for kind, t, peaks in rows:
        print(
            f"{kind:8} {t * 1e3:8.1f} {args.mib / t:6.0f} "
            + " ".join(f"{cell(peaks.get(w)):>14}" for w in ("driver", "beamd", "worker"))
        )


if __name__ == "__main__":
    main()
