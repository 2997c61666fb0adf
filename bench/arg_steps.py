#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where one 64 MiB actor argument's time goes, per process and per step
(beam only; bench_data.py's "argument 64 MiB" row, taken apart).

    source build/env.sh && $BEAM_PYTHON bench/arg_steps.py [--size MiB] [--calls N] [--warm N]

The driver calls ``ray.get(a.size.remote(x))`` as bench_data.py does (the
actor reads one byte); --warm calls first, discarded. Each step is timed by
a wrapper put around the function that does it, in the driver and, from the
actor's __init__, in the worker; their clocks are one (CLOCK_MONOTONIC), so
the worker's steps are placed on the call's timeline too. Printed: the
median of each step over the calls (ms), how often the producer's memfd
pool hit, the minor page faults per call of the driver, the worker and
beamd, and beamd's CPU per call. Wrappers cost a few us each. ``--copies`` times
instead, in this process alone, each way of writing the value into a memfd
(and a reader's map) that the design weighed.
"""

import argparse
import collections
import os
import resource
import statistics
import tempfile
import time

now = time.monotonic_ns


class Log:
    """Spans (name, start, end) of the current call, and a counter."""

    def __init__(self):
        self.spans = []
        self.count = collections.Counter()

    def wrap(self, owner, attr, name=None):
        fn = getattr(owner, attr)
        name = name or attr
        log = self

        def timed(*a, **k):
            t = now()
            try:
                return fn(*a, **k)
            finally:
                log.spans.append((name, t, now()))

        setattr(owner, attr, timed)


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Probe:
    """The actor: bench_data.py's Store.size, its worker's steps timed."""

    def __init__(self):
        import ray._worker as w
        from ray._private import shm

        self.log = Log()
        self.log.wrap(w.Worker, "call", "w.call")
        self.log.wrap(w, "_resolve_args", "w.resolve_args (get + map + loads)")
        self.log.wrap(shm, "read", "w.shm.read (open + map)")
        self.log.wrap(w.Worker, "finish", "w.finish (result sent)")
        self.f0 = _faults()

    def size(self, x):
        t = now()
        r = int(x[-1]) + x.nbytes
        self.log.spans.append(("w.method", t, now()))
        return r

    def take(self):
        spans, self.log.spans = self.log.spans, []
        f, self.f0 = _faults() - self.f0, _faults()
        return spans, f


def _proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(v[7]), (int(v[11]) + int(v[12])) / tick  # minflt, utime+stime seconds


def copies(size, reps):
    """What writing size bytes into a memfd costs here, each way (no beamd):
    medians of reps, ms."""
    import ctypes
    import mmap

    import numpy

    from ray._private import shm

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    src = numpy.ones(size, numpy.uint8)
    anon = numpy.zeros(size, numpy.uint8)
    rw = mmap.PROT_READ | mmap.PROT_WRITE

    def memfd():
        fd = os.memfd_create("x", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return fd

    def arr(m):
        return numpy.frombuffer(m, numpy.uint8)

    warm_fd = memfd()
    warm = shm._map(warm_fd, size, rw, mmap.MAP_POPULATE)
    arr(warm)[:] = 1

    def fresh(how):
        fd = memfd()
        try:
            if how == "pwritev":
                shm._pwrite_all(fd, [src], size)
                return
            if how == "fallocate":
                os.posix_fallocate(fd, 0, size)
            m = shm._map(fd, size, rw, mmap.MAP_POPULATE if how == "MAP_POPULATE" else 0)
            if how == "MADV_POPULATE_WRITE":
                libc.madvise(ctypes.addressof(m), size, 23)
            shm._copy(memoryview(m).cast("B"), memoryview(src))
        finally:
            os.close(fd)

    def reader(flags, advice=None):
        fd = os.open(f"/proc/self/fd/{warm_fd}", os.O_RDONLY)
        try:
            m = shm._map(fd, size, mmap.PROT_READ, flags)
            if advice:
                libc.madvise(ctypes.addressof(m), size, advice)
            return m[size - 1]
        finally:
            os.close(fd)

    chunk = shm.COPY_CHUNK

    def split(threads, mib=None):
        def run():
            if shm.COPY_THREADS != threads:
                shm.COPY_THREADS, shm._copier = threads, None
            shm.COPY_CHUNK = (mib << 20) if mib else chunk
            shm._copy(memoryview(warm).cast("B"), memoryview(src))
            shm.COPY_CHUNK = chunk

        return run

    ways = {
        "anon -> anon, numpy copy, 1 thread": lambda: numpy.copyto(anon, src),
        "into a warm memfd mapping, 1 thread": lambda: numpy.copyto(arr(warm), src),
        **{f"into a warm memfd mapping, shm._copy, {t} threads": split(t) for t in (2, 3, 4)},
        **{f"into a warm memfd mapping, shm._copy, 2 threads, {c} MiB chunks": split(2, c) for c in (1, 4, 8)},
        "new memfd: pwritev (main's first write)": lambda: fresh("pwritev"),
        "new memfd: map, shm._copy (faults in the copy)": lambda: fresh("fault"),
        "new memfd: MAP_POPULATE, shm._copy": lambda: fresh("MAP_POPULATE"),
        "new memfd: MADV_POPULATE_WRITE, shm._copy": lambda: fresh("MADV_POPULATE_WRITE"),
        "new memfd: fallocate, map, shm._copy": lambda: fresh("fallocate"),
        "reader: map ro, touch last byte": lambda: reader(0),
        "reader: map ro MAP_POPULATE, touch last byte": lambda: reader(mmap.MAP_POPULATE),
        "reader: map ro, MADV_POPULATE_READ": lambda: reader(0, 22),
    }
    threads = shm.COPY_THREADS
    for name, fn in ways.items():
        if "new memfd" in name and shm.COPY_THREADS != threads:
            shm.COPY_THREADS, shm._copier = threads, None
        fn()
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        print(f"{name:52} {statistics.median(t) * 1e3:8.2f} ms  (min {min(t) * 1e3:.2f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", action="store_true", help="only what each way of writing a memfd costs")
    ap.add_argument("--size", type=int, default=64, help="MiB")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--warm", type=int, default=5)
    args = ap.parse_args()
    if args.copies:
        print(f"{args.size} MiB, load {os.getloadavg()[0]:.2f}")
        copies(args.size << 20, args.calls)
        return
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="argsteps-"))
    import numpy

    import ray
    from ray._private import shm
    from ray._private import worker as wk

    ray.init(num_cpus=2, num_gpus=0)
    a = ray.remote(num_cpus=0)(Probe).remote()
    n = args.size << 20
    x = numpy.ones(n, dtype=numpy.uint8)
    log = Log()
    log.wrap(wk, "dumps_args", "d.dumps_args (put)")
    log.wrap(wk, "send_value", "d.send_value (write + put request)")
    log.wrap(shm, "write", "d.shm.write")
    log.wrap(shm, "_reuse", "d.shm._reuse (pool, leases)")
    log.wrap(wk, "_settle", "d.settle (releases, round trip)")
    log.wrap(shm.Memfd, "__init__", "d.Memfd() new")
    log.wrap(shm.Memfd, "prepare", "d.Memfd.prepare (map)")
    log.wrap(shm.Memfd, "write", "d.Memfd.write (the copy)")
    log.wrap(shm, "_pwrite_all", "d.pwritev into new pages")
    log.wrap(shm, "_copy", "d.memcpy into the pool's pages")
    beamd = wk.status()["pid"]
    for _ in range(args.warm):
        ray.get(a.size.remote(x))
    ray.get(a.take.remote())
    log.spans.clear()
    per_step = collections.defaultdict(list)
    offsets = collections.defaultdict(list)
    totals, hits, d_faults, w_faults = [], 0, 0, 0
    b_f0, b_cpu0 = _proc_stat(beamd)
    for _ in range(args.calls):
        f0 = _faults()
        t0 = now()
        ref = a.size.remote(x)
        t_sub = now()
        ray.get(ref)
        t1 = now()
        d_faults += _faults() - f0
        del ref
        spans, wf = ray.get(a.take.remote())
        w_faults += wf
        spans = log.spans + spans
        log.spans = []
        hits += not any(s[0] == "d.Memfd() new" for s in spans)
        totals.append((t1 - t0) / 1e6)
        per_step["d.remote() (put + submit sent)"].append((t_sub - t0) / 1e6)
        offsets["d.remote() (put + submit sent)"].append((t_sub - t0) / 1e6)
        per_step["d.ray.get wait"].append((t1 - t_sub) / 1e6)
        for name, s, e in spans:
            if not t0 <= s <= t1:
                continue  # the take() calls' own spans
            if name == "w.call" and e > t1:
                e = t1  # the call's own span ends after its result is sent
            per_step[name].append((e - s) / 1e6)
            offsets[name].append((e - t0) / 1e6)
    b_f1, b_cpu1 = _proc_stat(beamd)
    c = args.calls
    print(f"{args.size} MiB argument, {c} calls after {args.warm} warm-up; load {os.getloadavg()[0]:.2f}")
    print(f"call (median): {statistics.median(totals):.2f} ms  [min {min(totals):.2f}, max {max(totals):.2f}]")
    print(
        f"pool hits: {hits}/{c}; minor faults per call: driver {d_faults / c:.0f}, worker {w_faults / c:.0f}, "
        f"beamd {(b_f1 - b_f0) / c:.0f}; beamd CPU per call {(b_cpu1 - b_cpu0) / c * 1e3:.2f} ms"
    )
    print(f"{'step':44} {'median ms':>10} {'n':>4} {'ends at ms':>11}")
    order = sorted(per_step, key=lambda k: statistics.median(offsets[k]) if offsets[k] else 0)
    for k in order:
        v = per_step[k]
        end = f"{statistics.median(offsets[k]):11.2f}" if offsets[k] else ""
        print(f"{k:44} {statistics.median(v):10.2f} {len(v):4} {end}")
    ray.shutdown()


if __name__ == "__main__":
    main()
