#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Soak: many actor calls and ray.puts against one beamd, refs dropped as
they go, to show that beamd's memory and open fds stay flat and its object
table drains.

    source build/env.sh
    /usr/bin/python3 bench/soak.py --calls 1000000 --puts 100000

It starts its own beamd (BEAM_BEAMD, else build/beamd; tests/python/beamkit) on a private socket
unless --socket names a running one. After --warmup calls (and a tenth as
many puts) it samples beamd's VmRSS and open fds; it samples again at each
tenth of the run and at the end, once the driver's releases are flushed and
the object table is empty. It exits 1 if the end RSS is more than 10% above
the warm-up RSS (--rss-slack), the fd count changed, or objects are left.
"""

import argparse
import gc
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import benchutil  # noqa: E402  (bench/, this script's folder)

from beamkit.procs import fd_count, rss_kib  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1_000_000, help="actor calls after warm-up (default 1M)")
    ap.add_argument("--puts", type=int, default=100_000, help="ray.put calls after warm-up (default 100k)")
    ap.add_argument("--warmup", type=int, default=20_000, help="calls before the baseline sample")
    ap.add_argument("--batch", type=int, default=1000, help="calls in flight before a ray.get of them")
    ap.add_argument("--put-size", type=int, default=1024, help="bytes in each put (varied +-50%%)")
    ap.add_argument("--rss-slack", type=float, default=0.10, help="allowed RSS growth over warm-up")
    ap.add_argument("--socket", help="use the beamd at this socket instead of starting one")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line too")
    args = ap.parse_args()

    daemon = None
    if args.socket:
        sock = args.socket
    else:
        from beamkit.daemon import Beamd

        os.environ.setdefault("BEAM_BEAMD", os.path.join(REPO, "build", "beamd"))
        daemon = Beamd(num_gpus=0, num_cpus=4, extra=["--log-level", "warn"])
        sock = daemon.socket
    os.environ["BEAM_SOCKET"] = sock
    os.environ.pop("RAY_ADDRESS", None)
    import ray
    from ray._private import worker as rtmod

    try:
        ray.init()

        Counter = ray.remote(benchutil.Counter)

        def status():
            return rtmod.runtime().client.request("status", {})

        def flush():
            gc.collect()
            rtmod.runtime().client.flush()

        pid = status()["pid"]
        actor = Counter.remote()
        ray.get(actor.add.remote(0))
        payload = os.urandom(args.put_size * 2)

        done_calls = done_puts = 0

        def run(calls, puts):
            """calls actor calls and puts puts, interleaved, refs dropped."""
            nonlocal done_calls, done_puts
            c = p = 0
            while c < calls or p < puts:
                n = min(args.batch, calls - c)
                refs = [actor.add.remote(1) for _ in range(n)]
                # puts in proportion to calls, each a little different in size
                want = puts if c + n >= calls else min(puts, (c + n) * puts // max(calls, 1))
                while p < want:
                    size = args.put_size // 2 + (p * 7919) % (args.put_size + 1)
                    ref = ray.put(payload[:size])
                    if p % 100 == 0:
                        assert len(ray.get(ref)) == size
                    del ref
                    p += 1
                    done_puts += 1
                if refs:
                    ray.get(refs[-1])  # calls run in order: the last done means all are
                    del refs
                c += n
                done_calls += n
            return c, p

        base_puts = 0
        t0 = time.monotonic()
        run(args.warmup, args.warmup // 10)
        base_puts = done_puts
        flush()
        time.sleep(0.2)
        warm = {
            "rss_kib": rss_kib(pid),
            "fds": fd_count(pid),
            "objects": status()["objects"]["count"],
            "s": round(time.monotonic() - t0, 2),
        }
        print(
            f"soak: warm-up {args.warmup} calls, {args.warmup // 10} puts in {warm['s']}s: "
            f"beamd RSS {warm['rss_kib']} KiB, {warm['fds']} fds, {warm['objects']} objects",
            flush=True,
        )

        samples = []
        t1 = time.monotonic()
        steps = 10
        for i in range(steps):
            c = args.calls * (i + 1) // steps - args.calls * i // steps
            p = args.puts * (i + 1) // steps - args.puts * i // steps
            run(c, p)
            now = time.monotonic() - t1
            s = {
                "calls": done_calls - args.warmup,
                "puts": done_puts - base_puts,
                "s": round(now, 2),
                "rss_kib": rss_kib(pid),
                "fds": fd_count(pid),
                "objects": status()["objects"]["count"],
            }
            samples.append(s)
            rate = s["calls"] / now if now else 0
            print(
                f"soak: {s['calls']:>9} calls {s['puts']:>8} puts {now:8.1f}s {rate:8.0f} calls/s  "
                f"RSS {s['rss_kib']} KiB  fds {s['fds']}  objects {s['objects']}",
                flush=True,
            )
        elapsed = time.monotonic() - t1

        flush()
        deadline = time.monotonic() + 10
        while status()["objects"]["count"] and time.monotonic() < deadline:
            flush()
            time.sleep(0.05)
        end = {"rss_kib": rss_kib(pid), "fds": fd_count(pid), "objects": status()["objects"]["count"]}
        assert ray.get(actor.add.remote(0)) == done_calls
        growth = (end["rss_kib"] - warm["rss_kib"]) / warm["rss_kib"]
        result = {
            "calls": args.calls,
            "puts": args.puts,
            "seconds": round(elapsed, 1),
            "calls_per_s": round(args.calls / elapsed) if elapsed else None,
            "warm": warm,
            "end": end,
            "rss_growth": round(growth, 4),
            "peak_rss_kib": max([warm["rss_kib"]] + [s["rss_kib"] for s in samples]),
        }
        print(
            f"soak: {args.calls} calls and {args.puts} puts in {elapsed:.1f}s "
            f"({result['calls_per_s']} calls/s); beamd RSS {warm['rss_kib']} -> {end['rss_kib']} KiB "
            f"({growth:+.1%}), fds {warm['fds']} -> {end['fds']}, objects at the end {end['objects']}"
        )
        if args.json:
            print(json.dumps(result))
        ok = growth <= args.rss_slack and end["fds"] == warm["fds"] and end["objects"] == 0
        if not ok:
            print("soak: FAILED", file=sys.stderr)
        return 0 if ok else 1
    finally:
        ray.shutdown()
        if daemon:
            daemon.close()


if __name__ == "__main__":
    sys.exit(main())
