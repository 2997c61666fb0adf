#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One compiled-graph connection between two processes of this node, with
and without its shared-memory slots (ray/dag/_transport.py, Lane): the
round trip of a frame carrying one numpy array of each size (the reader
reads every byte of it, a sum of its 8-byte words, and answers one byte), socket and slots
alternated each round; medians. What SHM_MIN (the threshold) is chosen by.

    source build/env.sh && $BEAM_PYTHON bench/bench_cgraph_lane.py [--rounds N] [--reps N]
"""

import argparse
import os
import socket
import statistics
import sys
import time

import numpy as np

from ray.dag import _transport as T

SIZES = [(f"{n >> 10} KiB", n) for n in (32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20)] + [
    ("4 MiB", 4 << 20),
    ("64 MiB", 64 << 20),
]


def _reader(sock):
    conn = T.Conn(sock)
    try:
        while True:
            f = conn.read()
            x = T.loads(f.payload, f.buffers)
            if x is None:
                return
            int(np.add.reduce(x.view(np.uint64)))
            del x, f
            sock.sendall(b"k")
    except T.Closed:
        return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args()
    print(f"{'size':>8} {'socket':>10} {'slots':>10} {'slots/socket':>13}")
    for label, n in SIZES:
        reps = max(5, args.reps // 8) if n >= 32 << 20 else args.reps
        x = np.ones(n, dtype=np.uint8)
        got = {"socket": [], "slots": []}
        for _ in range(args.rounds):
            for mode in got:
                a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                pid = os.fork()
                if pid == 0:
                    a.close()
                    _reader(b)
                    os._exit(0)
                b.close()
                conn = T.Conn(a)
                T._tune(a)
                if mode == "slots":
                    conn.enable_shm(4)
                saved, T.SHM_MIN = T.SHM_MIN, 0
                payload, bufs = T.dumps(x)
                times = []
                for i in range(reps + 3):
                    t = time.perf_counter()
                    conn.send(T.VALUE, 1, i, payload, bufs)
                    a.recv(1)
                    times.append(time.perf_counter() - t)
                T.SHM_MIN = saved
                conn.send(T.VALUE, 1, 0, *T.dumps(None))
                conn.close()
                os.waitpid(pid, 0)
                got[mode].append(statistics.median(times[3:]))
        s, m = (statistics.median(got[k]) for k in ("socket", "slots"))
        print(f"{label:>8} {s * 1e6:8.0f}us {m * 1e6:8.0f}us {m / s:13.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
