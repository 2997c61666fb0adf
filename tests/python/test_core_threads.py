# SPDX-License-Identifier: Apache-2.0
"""ray.get, ray.wait and ray.kill from several threads at once, the way
vLLM's executor monitor uses them, against a real beamd."""

import os
import textwrap
import threading
import time

import pytest

from beamkit.daemon import run_driver
from beamkit.procs import wait_until


def _worker_class(ray):
    @ray.remote(num_gpus=1)
    class Worker:
        def pid(self):
            return os.getpid()

        def run(self):
            while True:
                time.sleep(1)

        def echo(self, x):
            return x

    return Worker


@pytest.mark.ray_compat
def test_monitor_thread_sees_killed_actor(ray_start):
    """vLLM's RayExecutorV2 monitor: a daemon thread loops
    ray.wait(run_refs, num_returns=1, timeout=5.0) while the main thread
    kills one worker."""
    ray = ray_start
    W = _worker_class(ray)
    workers = [W.remote() for _ in range(4)]
    ray.get([w.pid.remote() for w in workers])
    run_refs = [w.run.remote() for w in workers]
    ref_to_rank = {r: i for i, r in enumerate(run_refs)}
    seen = {}
    stop = threading.Event()

    def monitor():
        while not stop.is_set() and ray.is_initialized():
            try:
                done, _ = ray.wait(run_refs, num_returns=1, timeout=5.0)
            except Exception as e:  # noqa: BLE001 - recorded for the test
                seen["error"] = e
                return
            if done:
                seen["rank"] = ref_to_rank[done[0]]
                seen["at"] = time.monotonic()
                return

    t = threading.Thread(target=monitor, daemon=True)
    t.start()
    time.sleep(0.2)  # the monitor is inside ray.wait
    assert "rank" not in seen
    killed_at = time.monotonic()
    ray.kill(workers[2])
    t.join(timeout=5)
    assert not t.is_alive()
    assert "error" not in seen, seen.get("error")
    assert seen["rank"] == 2
    assert seen["at"] - killed_at < 3
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(run_refs[2])
    # the others are still running
    ready, rest = ray.wait(run_refs, num_returns=1, timeout=0)
    assert ready == [run_refs[2]]
    assert rest == run_refs[:2] + run_refs[3:]
    stop.set()


@pytest.mark.ray_compat
def test_get_wait_kill_from_many_threads(ray_start):
    ray = ray_start

    @ray.remote
    class Echo:
        def echo(self, x):
            return x

        def slow(self, t):
            time.sleep(t)
            return t

    echoes = [Echo.remote() for _ in range(4)]
    victims = [Echo.remote() for _ in range(4)]
    ray.get([e.echo.remote(0) for e in echoes + victims])
    victim_refs = [v.slow.remote(30) for v in victims]
    errors = []
    results = {}

    def getter(i):
        try:
            e = echoes[i % 4]
            out = []
            for j in range(25):
                out.append(ray.get(e.echo.remote((i, j))))
                ray.get([ray.put(j), e.echo.remote(j)])
            results[i] = out
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def waiter():
        try:
            left = list(victim_refs)
            while left:
                done, left = ray.wait(left, num_returns=1, timeout=5)
                if not done:
                    raise AssertionError("a killed victim was never reported")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def killer(v):
        try:
            time.sleep(0.05)
            ray.kill(v)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=getter, args=(i,)) for i in range(8)]
    threads += [threading.Thread(target=waiter) for _ in range(2)]
    threads += [threading.Thread(target=killer, args=(v,)) for v in victims]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    for i in range(8):
        assert results[i] == [(i, j) for j in range(25)]
    for r in victim_refs:
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(r, timeout=0)


@pytest.mark.ray_compat
def test_concurrent_timeouts_are_independent(ray_start):
    """A short ray.get timeout in one thread does not disturb a long wait
    in another."""
    ray = ray_start

    @ray.remote
    class Slow:
        def sleep(self, t):
            time.sleep(t)
            return t

    a, b = Slow.remote(), Slow.remote()
    long_ref = a.sleep.remote(0.8)
    never = b.sleep.remote(30)
    out = {}

    def long_get():
        out["long"] = ray.get(long_ref, timeout=5)

    t = threading.Thread(target=long_get)
    t.start()
    for _ in range(5):
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(never, timeout=0.05)
    t.join(timeout=5)
    assert out == {"long": 0.8}
    ray.kill(b)


def test_shutdown_while_thread_waits_does_not_crash(beamd):
    """vLLM: "ray.wait segfaults if Ray is torn down underneath it". A
    thread blocked in ray.wait/ray.get when ray.shutdown() runs must get an
    exception (or an answer), not crash the process or hang."""
    out = run_driver(
        textwrap.dedent("""
        import threading, time
        import ray
        ray.init()

        @ray.remote
        class Forever:
            def run(self):
                while True:
                    time.sleep(1)

        f = Forever.remote()
        ref = f.run.remote()
        outcome = {}

        def waiter(kind):
            try:
                if kind == "wait":
                    outcome[kind] = ("returned", ray.wait([ref], timeout=10))
                else:
                    outcome[kind] = ("returned", ray.get(ref, timeout=10))
            except BaseException as e:
                outcome[kind] = ("raised", type(e).__name__)

        threads = [threading.Thread(target=waiter, args=(k,)) for k in ("wait", "get")]
        for t in threads:
            t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        ray.shutdown()
        for t in threads:
            t.join(timeout=5)
        print("ALIVE", [t.is_alive() for t in threads])
        print("TOOK", time.monotonic() - t0 < 5)
        print("WAIT", outcome.get("wait", ("missing",))[0])
        print("GET", outcome.get("get", ("missing",))[0])
        print("INIT", ray.is_initialized())
    """),
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "ALIVE [False, False]" in lines
    assert "TOOK True" in lines
    assert "GET raised" in lines
    assert "WAIT raised" in lines or "WAIT returned" in lines
    assert "INIT False" in lines


@pytest.mark.ray_compat
def test_get_forever_released_by_kill_from_another_thread(ray_start):
    """ray.get with no timeout on a call that never returns; another thread
    kills the actor; the get raises instead of hanging."""
    ray = ray_start
    w = _worker_class(ray).remote()
    ray.get(w.pid.remote())
    ref = w.run.remote()
    t = threading.Timer(0.2, ray.kill, args=(w,))
    t.start()
    t0 = time.monotonic()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(ref)
    assert time.monotonic() - t0 < 5
    t.join()


def test_refs_made_and_dropped_in_many_threads(ray_start, beamd):
    import gc

    ray = ray_start

    @ray.remote
    class Echo:
        def echo(self, x):
            return x

    e = Echo.remote()
    errors = []

    def churn(i):
        try:
            for j in range(50):
                r = ray.put((i, j))
                c = e.echo.remote(r)
                assert ray.get([r, c]) == [(i, j), (i, j)]
                shared = [r, c]
                del r, c
                assert ray.get(shared[1]) == (i, j)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    gc.collect()
    ray._private.worker.runtime().client.flush()
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 0, 5)
