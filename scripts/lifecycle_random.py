#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Longer runs of the randomized lifecycle test (tests/python/beamkit/lifecycle.py):
seed after seed against a fresh beamd each, until one fails or the time or
the seeds run out. Prints each seed as it starts, so any failure replays
with --seed; on a failure prints the last steps and beamd's log (with the
sanitizer's report when there is one) and exits 1.

    source build/env.sh && $BEAM_PYTHON scripts/lifecycle_random.py --minutes 10
    source build/env.sh && $BEAM_PYTHON scripts/lifecycle_random.py --seed 1234 --steps 500 -v

Against the ASan/UBSan build (build-asan, as scripts/test.sh makes it):

    source build-asan/env.sh && LD_PRELOAD=$(gcc -print-file-name=libasan.so) \\
        ASAN_OPTIONS=detect_leaks=0 $BEAM_PYTHON scripts/lifecycle_random.py --minutes 10
"""

import argparse
import os
import random
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

from beamkit import lifecycle  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, action="append", help="run this seed (repeatable); default: random seeds")
    ap.add_argument("--steps", type=int, default=300, help="steps per seed (default 300)")
    ap.add_argument("--drivers", type=int, default=3, help="driver processes (default 3)")
    ap.add_argument("--quiesce-every", type=int, default=50, help="steps between quiescence checks (default 50)")
    ap.add_argument("--minutes", type=float, default=None, help="keep running random seeds this long")
    ap.add_argument(
        "--runs", type=int, default=None, help="random seeds to run (default 5, or unbounded with --minutes)"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command and reply")
    args = ap.parse_args()
    if not os.environ.get("BEAM_BEAMD"):
        sys.exit("BEAM_BEAMD is not set: source build/env.sh (or build-asan/env.sh) first")

    if args.seed:
        seeds = iter(args.seed)
    else:
        rnd = random.SystemRandom()
        limit = args.runs if args.runs is not None else (None if args.minutes else 5)

        def gen():
            n = 0
            while limit is None or n < limit:
                n += 1
                yield rnd.randrange(1, 2**31)

        seeds = gen()
    deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
    log = print if args.verbose else None
    done = 0
    total = {}
    t0 = time.monotonic()
    for seed in seeds:
        if deadline and time.monotonic() > deadline:
            break
        print(f"seed {seed}: {args.steps} steps, {args.drivers} drivers", flush=True)
        t = time.monotonic()
        try:
            stats = lifecycle.run(seed, args.steps, drivers=args.drivers, quiesce_every=args.quiesce_every, log=log)
        except lifecycle.LifecycleFailure as e:
            print(e, flush=True)
            print(f"FAILED: seed {seed} (after {done} passing seeds)", flush=True)
            return 1
        done += 1
        for k, v in stats.items():
            total[k] = total.get(k, 0) + v
        print(f"seed {seed}: ok in {time.monotonic() - t:.1f} s", flush=True)
    print(f"{done} seeds passed in {time.monotonic() - t0:.0f} s; steps taken: {sorted(total.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
