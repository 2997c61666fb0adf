#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Large values: beam against real Ray 2.43 in one run, alternated, as
medians and the ratio beam/Ray (lower is better for beam).

    source build/env.sh && $BEAM_PYTHON bench/bench_data.py [--quick] [--rounds N] [--ray-python PATH]

For numpy arrays of 64 KiB, 1 MiB and 64 MiB: put+get (``ray.get(ray.put(x))``),
an actor's return (``ray.get(a.make.remote(n))``, the array made in the
actor) and an actor argument (``ray.get(a.size.remote(x))``, the actor
reads one byte of it). Each side runs in its own interpreter (bench_vs_ray.py's
way: Ray with /opt/ray-venv, beam's python/ off its path); the sides take
turns, --rounds times, and each figure is the median over every round's
medians. The beam side also prints beamd's RSS before and after (kB).
"""

import argparse
import json
import statistics
import sys

from benchutil import fmt, side_envs, side_in_subprocess, timed

SIZES = (("64 KiB", 64 << 10), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20))
KINDS = ("put+get", "return", "argument")


class Store:
    """The actor: makes arrays and reads the ones it is given."""

    def make(self, n):
        import numpy

        return numpy.ones(n, dtype=numpy.uint8)

    def size(self, x):
        return int(x[-1]) + x.nbytes


def _daemon_rss(ray):
    """beamd's resident set in kB (None on real Ray)."""
    if getattr(ray, "__commit__", "") != "beam":
        return None
    from ray._private import worker

    with open(f"/proc/{worker.status()['pid']}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def run_side(quick):
    import numpy

    import ray

    init_kw = {"num_cpus": 2, "num_gpus": 0}
    if getattr(ray, "__commit__", "") != "beam":
        init_kw.update(include_dashboard=False, log_to_driver=False)
    ray.init(**init_kw)
    a = ray.remote(num_cpus=0)(Store).remote()
    ray.get(a.make.remote(1))
    out = {"rss_before": _daemon_rss(ray)}
    for label, n in SIZES:
        reps = (3 if quick else 10) if n >= 32 << 20 else (20 if quick else 100)
        x = numpy.ones(n, dtype=numpy.uint8)
        for kind, fn in (
            ("put+get", lambda: ray.get(ray.put(x))),
            ("return", lambda: ray.get(a.make.remote(n))),
            ("argument", lambda: ray.get(a.size.remote(x))),
        ):
            fn()
            out[f"{kind} {label}"] = timed(fn, reps)
    out["rss_after"] = _daemon_rss(ray)
    ray.shutdown()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--rounds", type=int, default=3, help="turns each side takes (alternated)")
    ap.add_argument("--ray-python", default="/opt/ray-venv/bin/python")
    ap.add_argument("--side", metavar="OUT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        with open(args.side, "w") as f:
            json.dump(run_side(args.quick), f)
        return
    base, ray_env = side_envs()
    extra = ["--quick"] if args.quick else []
    beam, real = [], []
    for r in range(args.rounds):
        print(f"round {r + 1}: beam ...", file=sys.stderr, flush=True)
        beam.append(side_in_subprocess(__file__, sys.executable, base, extra))
        print(f"round {r + 1}: Ray ...", file=sys.stderr, flush=True)
        real.append(side_in_subprocess(__file__, args.ray_python, ray_env, extra))
    print(f"{'workload':22} {'beam':>10} {'Ray 2.43':>10} {'beam/Ray':>9}")
    for label, _ in SIZES:
        for kind in KINDS:
            w = f"{kind} {label}"
            b = statistics.median(s[w] for s in beam)
            r = statistics.median(s[w] for s in real)
            print(f"{w:22} {fmt(b):>10} {fmt(r):>10} {b / r:>9.2f}")
    rss = [(s["rss_before"], s["rss_after"]) for s in beam]
    print("beamd RSS (kB) before/after each round:", rss)


if __name__ == "__main__":
    main()
