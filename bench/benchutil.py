# SPDX-License-Identifier: Apache-2.0
"""What the benchmarks share (standard library only: bench_vs_ray.py runs
it under real Ray's interpreter too): timed(), the median of repeated runs,
Counter, the actor they call, side_in_subprocess, which runs a script's one
side (beam or real Ray) in its own interpreter, and PipeActor, the baseline every actor call is compared with, a
multiprocessing.Pipe to a spawned process that keeps a counter and one
object."""

import json
import multiprocessing as mp
import os
import statistics
import subprocess
import tempfile
import threading
import time


def init_ray(cpus):
    """ray.init of a local node of cpus CPUs, on beam or on real Ray (its
    dashboard off); returns the system's name for the report."""
    import ray

    if getattr(ray, "__commit__", "") == "beam":
        ray.init(num_cpus=cpus)
        return "beam"
    ray.init(num_cpus=cpus, include_dashboard=False)
    return f"ray {ray.__version__}"


def timed(fn, repeat):
    """The median wall time of repeat calls of fn(), in seconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def timed_start(start, stop, repeat):
    """The median wall time of start() over repeat rounds; stop(what start
    returned) ends each round, untimed."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        made = start()
        times.append(time.perf_counter() - t)
        stop(made)
    return statistics.median(times)


class Counter:
    """The actor every benchmark calls (ray.remote(Counter) there): add(k)
    returns the running sum."""

    def __init__(self):
        self.n = 0

    def add(self, k):
        self.n += k
        return self.n


def _pipe_server(conn):
    n, obj = 0, None
    while True:
        msg = conn.recv()
        if msg is None:
            return
        op, arg = msg
        if op == "add":
            n += arg
            conn.send(n)
        elif op == "put":
            obj = arg
            conn.send(True)
        elif op == "get":
            conn.send(obj)
        else:
            conn.send(None)


class PipeActor:
    """A process answering ("add", k), ("put", obj) and ("get", None) over a
    multiprocessing.Pipe, as an actor answers calls."""

    def __init__(self):
        self.conn, child = mp.Pipe()
        self.proc = mp.get_context("spawn").Process(target=_pipe_server, args=(child,), daemon=True)
        self.proc.start()

    def call(self, op, arg):
        self.conn.send((op, arg))
        return self.conn.recv()

    def in_flight(self, n):
        """n adds sent before their answers are read (the sends go from a
        thread, so neither side blocks on a full pipe)."""
        sender = threading.Thread(target=lambda: [self.conn.send(("add", 1)) for _ in range(n)])
        sender.start()
        for _ in range(n):
            self.conn.recv()
        sender.join()

    def close(self):
        self.conn.send(None)
        self.proc.join()


def side_envs():
    """(beam's environment, real Ray's) for side_in_subprocess: neither sees
    a running cluster; Ray's has no beam paths and no usage stats."""
    base = {k: v for k, v in os.environ.items() if k not in ("BEAM_SOCKET", "RAY_ADDRESS")}
    ray_env = {k: v for k, v in base.items() if not k.startswith("BEAM_") and k != "PYTHONPATH"}
    ray_env["RAY_USAGE_STATS_ENABLED"] = "0"
    return base, ray_env


def side_in_subprocess(script, python, env, extra=()):
    """Runs `python script --side OUT *extra` and returns the JSON it wrote
    to OUT. Results and errors go through files: Ray's daemons inherit the
    side's stdout and stderr and outlive it, so pipes would never see EOF."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "out.json"), os.path.join(tmp, "err.txt")
        cmd = [python, os.path.abspath(script), "--side", out, *extra]
        with open(err, "w") as err_file:
            done = subprocess.run(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file, timeout=900
            )
        if done.returncode != 0:
            with open(err) as f:
                raise RuntimeError(f"{python} failed:\n{f.read()[-3000:]}")
        with open(out) as f:
            return json.load(f)


def fmt(seconds):
    """A duration for a table."""
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"
