# SPDX-License-Identifier: Apache-2.0
"""Faults: processes killed or stopped in the middle of things — a worker
mid-call, a driver mid-call, beamd itself, a stopped worker, a worker that
writes half a message — and workers that send bad results. After each, no
beam process is left behind (the beamd fixture checks) and the daemon's
tables are consistent: no actor but DEAD ones, nothing running or queued,
every resource back, no object left once the refs are gone."""

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from beamkit.client import Conn
from beamkit.daemon import Beamd
from beamkit.procs import alive, beam_processes, fd_count, next_line, rss_kib, sanitized, wait_gone, wait_until


def _flush(ray):
    gc.collect()
    from ray._private import worker as rtmod

    if rtmod.is_initialized():
        rtmod.runtime().client.flush()


def _consistent(beamd, drivers=None):
    """The tables after a fault: every actor DEAD with nothing running or
    queued, every resource back, no object and no live group left."""
    st = beamd.status()
    for a in st["actors"]:
        assert a["state"] == "DEAD", a
        assert a["running"] == 0 and a["queued"] == 0 and a["pid"] == 0, a
    assert st["resources_available"] == st["resources_total"], st["resources_available"]
    assert all(g["state"] == "REMOVED" for g in st["placement_groups"]), st["placement_groups"]
    assert st["objects"] == {"count": 0, "bytes": 0}, st["objects"]
    if drivers is not None:
        assert st["clients"]["drivers"] == drivers, st["clients"]
    assert st["clients"]["workers"] == 0, st["clients"]
    return st


def _settled(ray, beamd, drivers=None):
    """Waits (a little) for releases and exits to land, then checks."""

    def ok():
        _flush(ray)
        try:
            _consistent(beamd, drivers)
            return True
        except AssertionError:
            return False

    wait_until(ok, 5)
    _flush(ray)
    return _consistent(beamd, drivers)


def _victim(ray):
    @ray.remote
    class Victim:
        def pid(self):
            return os.getpid()

        def ping(self):
            return "pong"

        def sleep(self, s):
            time.sleep(s)
            return s

        def raw(self, data, then):
            """Writes data on this worker's own connection to beamd, past
            _beam, then exits, sleeps, or returns."""
            import socket

            path = os.environ["BEAM_SOCKET"]
            done = False
            for name in os.listdir("/proc/self/fd"):
                try:
                    s = socket.socket(fileno=os.dup(int(name)))
                except OSError:
                    continue
                try:
                    if s.family == socket.AF_UNIX and s.getpeername() == path:
                        s.sendall(data)
                        done = True
                finally:
                    s.close()
                if done:
                    break
            assert done, "no connection to beamd found"
            if then == "exit":
                os._exit(3)
            if then == "sleep":
                time.sleep(3600)
            return "written"

        def client_request(self, op, params, timeout):
            """A request on this worker's _beam client: (code, message) of
            the error reply, or ("ok", result)."""
            from ray._private import worker as rtmod

            client = rtmod.runtime().client
            try:
                return ("ok", client.request(op, params, timeout))
            except Exception as e:  # noqa: BLE001 - reported to the test
                # _beam's RemoteError carries (code, message)
                if len(e.args) == 2:
                    return tuple(e.args)
                return (type(e).__name__, str(e))

    return Victim


def _wait_running(beamd, actor_hex, timeout=10):
    def running():
        for a in beamd.status()["actors"]:
            if a["actor_id"] == actor_hex and a["running"] >= 1:
                return True
        return False

    assert wait_until(running, timeout), beamd.status()["actors"]


# --- a worker killed mid-call ------------------------------------------------------


def test_sigkill_of_a_worker_mid_call(ray_start, beamd):
    ray = ray_start
    V = _victim(ray)
    v = V.options(num_gpus=1).remote()
    pid = ray.get(v.pid.remote())
    running = v.sleep.remote(60)
    queued = [v.ping.remote() for _ in range(5)]
    _wait_running(beamd, v._actor_id.hex())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ray.exceptions.ActorDiedError, match="worker process has died"):
        ray.get(running, timeout=10)
    assert time.monotonic() - t0 < 2
    for ref in queued:
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(ref, timeout=5)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(v.ping.remote(), timeout=5)
    assert wait_gone(pid, 5)
    # the node still runs new actors, on the GPU the dead one had
    w = V.options(num_gpus=4).remote()
    assert ray.get(w.ping.remote(), timeout=30) == "pong"
    ray.kill(w)
    del v, w, running, queued, ref
    _settled(ray, beamd, drivers=1)


# --- a driver killed mid-call ------------------------------------------------------

DRIVER = textwrap.dedent("""
    import json, os, sys, time
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init()

    @ray.remote
    class A:
        def pid(self):
            return os.getpid()
        def sleep(self, s):
            time.sleep(s)

    pg = placement_group([{"CPU": 1}, {"GPU": 1}])
    ray.get(pg.ready(), timeout=30)
    actors = [A.remote(), A.options(num_gpus=2).remote(),
              A.options(num_gpus=1, num_cpus=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
                  placement_group=pg, placement_group_bundle_index=1)).remote()]
    pids = ray.get([a.pid.remote() for a in actors], timeout=60)
    calls = [a.sleep.remote(600) for a in actors]
    kept = [ray.put(b"x" * 100000) for _ in range(10)]
    print(json.dumps({"pids": pids, "actors": [a._actor_id.hex() for a in actors]}), flush=True)
    time.sleep(600)
""")


def _start_driver(code, beamd):
    env = dict(os.environ, BEAM_SOCKET=beamd.socket)
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.PIPE,
        env=env,
        text=True,
    )


def _read_line(proc, timeout=60):
    line = next_line(proc, time.monotonic() + timeout)
    if line is None:
        proc.kill()
        raise AssertionError("the driver printed no line:\n" + proc.communicate()[1][-3000:])
    return line


def test_sigkill_of_a_driver_mid_call(beamd):
    proc = _start_driver(DRIVER, beamd)
    try:
        info = json.loads(_read_line(proc))
        st = beamd.status()
        assert sum(a["state"] == "ALIVE" for a in st["actors"]) == 3
        assert st["objects"]["count"] >= 10
        assert st["placement_groups"][0]["state"] == "CREATED"
        for hexid in info["actors"]:
            _wait_running(beamd, hexid)
        t0 = time.monotonic()
        proc.kill()
        proc.wait(5)

        def gone():
            s = beamd.status()
            return (
                all(a["state"] == "DEAD" and a["pid"] == 0 for a in s["actors"])
                and all(g["state"] == "REMOVED" for g in s["placement_groups"])
                and s["objects"]["count"] == 0
                and not any(alive(p) for p in info["pids"])
            )

        assert wait_until(gone, 1.0, interval=0.01), beamd.status()
        elapsed = time.monotonic() - t0
        # resources come back once the workers are reaped
        assert wait_until(lambda: beamd.status()["resources_available"] == beamd.status()["resources_total"], 2)
        st = _consistent(beamd, drivers=0)
        assert all("owner has died" in a["death"] for a in st["actors"])  # forgotten, or dead for that
        assert elapsed < 1.0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# --- beamd killed ----------------------------------------------------------------

AFTER_BEAMD = textwrap.dedent("""
    import json, os, sys, threading, time
    import ray

    ray.init()

    @ray.remote
    class A:
        def pid(self):
            return os.getpid()
        def spin(self):
            while True:
                pass
        def sleep(self, s):
            time.sleep(s)

    actors = [A.remote(), A.remote(), A.remote()]
    pids = ray.get([a.pid.remote() for a in actors], timeout=60)
    spinning = actors[1].spin.remote()
    sleeping = actors[2].sleep.remote(600)
    blocked = {}

    def get_forever():
        t0 = time.monotonic()
        try:
            ray.get(sleeping)
            blocked["result"] = "returned"
        except BaseException as e:
            blocked["result"] = type(e).__name__
        blocked["after"] = time.monotonic() - t0

    t = threading.Thread(target=get_forever, daemon=True)
    t.start()
    time.sleep(0.3)
    print(json.dumps({"pids": pids}), flush=True)
    sys.stdin.readline()  # beamd has been killed
    t.join(10)
    out = {"blocked": blocked}
    for name, fn in [("call", lambda: ray.get(actors[0].pid.remote(), timeout=5)),
                     ("get", lambda: ray.get(spinning, timeout=5)),
                     ("put", lambda: ray.put(1)),
                     ("kill", lambda: ray.kill(actors[0])),
                     ("new_actor", lambda: A.remote())]:
        t0 = time.monotonic()
        try:
            fn()
            out[name] = "no error"
        except BaseException as e:
            out[name] = [type(e).__name__, isinstance(e, (ray.exceptions.RaySystemError, ConnectionError)),
                         str(e)[:200]]
        out[name + "_s"] = round(time.monotonic() - t0, 2)
    print(json.dumps(out), flush=True)
    ray.shutdown()
""")


def test_sigkill_of_beamd():
    """Every worker exits by itself (parent-death signal, or EOF on its
    socket), a get blocked in another thread is released, and each later
    call raises RaySystemError or ConnectionError at once: none hangs."""
    d = Beamd()
    proc = None
    try:
        env = dict(os.environ, BEAM_SOCKET=d.socket)
        env.pop("RAY_ADDRESS", None)
        proc = subprocess.Popen(
            [sys.executable, "-c", AFTER_BEAMD],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE,
            env=env,
            text=True,
        )
        info = json.loads(_read_line(proc))
        workers = beam_processes(d.socket)
        assert set(info["pids"]) <= set(workers)
        d.proc.kill()
        d.proc.wait(5)
        t0 = time.monotonic()
        assert wait_gone(info["pids"], 2, interval=0.01), [p for p in info["pids"] if alive(p)]
        worker_exit_s = time.monotonic() - t0
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out = json.loads(_read_line(proc, timeout=30))
        proc.wait(15)
        assert out["blocked"].get("result") in ("RaySystemError", "ConnectionError"), out
        assert out["blocked"]["after"] < 5, out
        for name in ("call", "get", "put", "kill", "new_actor"):
            if name == "put" and out[name] == "no error":
                continue  # a put needs no answer; beam may queue it locally
            assert out[name] != "no error" and out[name][1], (name, out[name])
            assert out[name + "_s"] < 2, (name, out)
        assert proc.returncode == 0, proc.stderr.read()[-3000:]
        assert worker_exit_s < 2
        # nothing of the dead daemon is left
        assert beam_processes(d.socket) == []
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        d.kill9()
        d.close()


# --- a stopped worker -----------------------------------------------------------------


def test_sigstop_of_a_worker(ray_start, beamd):
    ray = ray_start
    v = _victim(ray).remote()
    pid = ray.get(v.pid.remote())
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        ref = v.ping.remote()
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(ref, timeout=0.5)
        elapsed = time.monotonic() - t0
        assert 0.45 < elapsed < 2, elapsed
        # other work goes on meanwhile
        assert ray.get(ray.put("other"), timeout=5) == "other"
        t0 = time.monotonic()
        ray.kill(v)
        with pytest.raises(ray.exceptions.ActorDiedError, match="ray.kill"):
            ray.get(ref, timeout=5)
        assert wait_gone(pid, 5), "a stopped worker survived ray.kill"
        assert time.monotonic() - t0 < 2
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGCONT)
    del ref, v
    _settled(ray, beamd, drivers=1)


# --- a worker that writes half a message, or garbage ------------------------------


@pytest.mark.parametrize(
    "data,then",
    [
        (b"\x00\x00\x03\xe8" + b"\x94\x00\x00\xa9task_done", "exit"),  # 1000 bytes announced, 14 sent
        (b"\x00\x00", "exit"),  # half a header
        (b"\x00\x00\x03\xe8" + b"\x94\x00\x00", "sleep"),  # then silence
        (b"\x00\x00\x00\x01\xc1", "sleep"),  # not msgpack: beamd closes it
        (b"\xff\xff\xff\xff", "sleep"),  # over the frame limit
    ],
    ids=["partial-exit", "half-header-exit", "partial-silent", "garbage", "huge-header"],
)
def test_a_worker_that_writes_a_partial_result(ray_start, beamd, data, then):
    ray = ray_start
    v = _victim(ray).remote()
    pid = ray.get(v.pid.remote())
    ref = v.raw.remote(data, then)
    later = v.ping.remote()
    if then == "sleep" and data.startswith(b"\x00\x00\x03\xe8"):
        # beamd waits for the rest of the frame; the caller's timeout works
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(ref, timeout=0.5)
        ray.kill(v)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(ref, timeout=10)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(later, timeout=10)
    assert wait_gone(pid, 5)
    log = beamd.read_log()
    if data == b"\x00\x00\x00\x01\xc1":
        assert "0xc1 is never used" in log, log[-2000:]
    if data == b"\xff\xff\xff\xff":
        assert "frame length 4294967295" in log, log[-2000:]
    # the node goes on
    w = _victim(ray).remote()
    assert ray.get(w.ping.remote(), timeout=30) == "pong"
    ray.kill(w)
    del v, w, ref, later
    _settled(ray, beamd, drivers=1)


# --- a worker that sends bad results ---------------------------------------------


def test_a_worker_sending_bad_task_done_fields(ray_start, beamd):
    ray = ray_start
    v = _victim(ray).remote()
    obj = b"\x00" * 28
    cases = [
        ({"obj": b"short", "status": 0, "data": b""}, "obj"),
        ({"obj": obj, "status": "0", "data": b""}, "status"),
        ({"obj": obj, "status": 7, "data": b""}, "status"),
        ({"obj": obj, "status": 0, "data": "text"}, "data"),
        ({"obj": obj, "status": 0}, "data"),
        ({"obj": obj, "status": 0, "data": b"", "objects": [b"x"]}, "objects"),
        ({"ok": "yes"}, "ok"),
    ]
    for params, field in cases:
        op = "actor_ready" if "ok" in params else "task_done"
        code, message = ray.get(v.client_request.remote(op, params, 5), timeout=30)
        assert code == "bad_request" and field in message, (params, code, message)
    # a well-formed result for a call it was never given
    code, message = ray.get(
        v.client_request.remote("task_done", {"obj": obj, "status": 0, "data": b"x"}, 5), timeout=30
    )
    assert code == "not_found", (code, message)
    # the worker is fine after all that
    assert ray.get(v.ping.remote(), timeout=10) == "pong"
    ray.kill(v)
    del v
    _settled(ray, beamd, drivers=1)


def test_task_done_for_an_unknown_call_does_not_leak(ray_start, beamd):
    """A refused result is freed: 100 MiB of task_done for calls the worker
    was never given leave beamd's RSS where it was."""
    ray = ray_start

    @ray.remote
    class Leaker:
        def send(self, n, size):
            from ray._private import worker as rtmod

            client = rtmod.runtime().client
            codes = set()
            for _ in range(n):
                try:
                    client.request("task_done", {"obj": b"\x00" * 28, "status": 0, "data": b"x" * size}, 5)
                except Exception as e:  # noqa: BLE001
                    codes.add(e.args[0] if len(e.args) == 2 else type(e).__name__)
            return sorted(codes)

    v = Leaker.remote()
    assert ray.get(v.send.remote(1, 10), timeout=30) == ["not_found"]
    pid = beamd.proc.pid
    before = rss_kib(pid)
    assert ray.get(v.send.remote(100, 1 << 20), timeout=60) == ["not_found"]
    grown = rss_kib(pid) - before
    ray.kill(v)
    if sanitized(pid):
        return  # ASan's quarantine keeps freed memory resident
    assert grown < 32 * 1024, f"beamd grew by {grown} KiB for 100 MiB of refused results"


def test_worker_ops_sent_as_requests_get_a_reply(ray_start, beamd):
    ray = ray_start
    v = _victim(ray).remote()
    code, message = ray.get(v.client_request.remote("actor_ready", {"ok": True}, 2), timeout=30)
    assert code == "ok", (code, message)


def test_fds_do_not_leak_across_worker_deaths(ray_start, beamd):
    """20 actors that die in different ways: beamd's open fds come back."""
    ray = ray_start
    V = _victim(ray)
    warm = V.remote()
    ray.get(warm.ping.remote(), timeout=30)  # warm: imports, first worker
    del warm
    _settled(ray, beamd, drivers=1)
    base = fd_count(beamd.proc.pid)
    for i in range(20):
        v = V.remote()
        pid = ray.get(v.pid.remote(), timeout=30)
        if i % 3 == 0:
            os.kill(pid, signal.SIGKILL)
        elif i % 3 == 1:
            ray.kill(v)
        else:
            ref = v.raw.remote(b"\x00\x00\x00\x01\xc1", "sleep")
            with pytest.raises(ray.exceptions.ActorDiedError):
                ray.get(ref, timeout=10)
            del ref
        del v
    _settled(ray, beamd, drivers=1)
    assert wait_until(lambda: fd_count(beamd.proc.pid) <= base, 5), (fd_count(beamd.proc.pid), base)
    with Conn(beamd.socket) as c:
        c.hello("ctl")
        assert c.call("status")["clients"]["workers"] == 0
