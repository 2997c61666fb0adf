# SPDX-License-Identifier: Apache-2.0
"""The worker's environment as Ray makes it: OMP_NUM_THREADS is the whole
CPUs a task or actor holds (at least 1; 1 when it holds none), unless the
user set it (Ray's set_omp_num_threads_if_unset, Ray issue #6998). Without
it every torch worker starts one OpenMP thread per core of the machine,
and vLLM's CPU workers on one node ran ~100x slower than on Ray.

ray_compat: the same tests pass on real Ray 2.43."""

import json
import os
import threading

import pytest

import ray
from beamkit.daemon import run_driver


def _omp():
    return os.environ.get("OMP_NUM_THREADS")


@ray.remote
class Probe:
    def omp(self):
        return _omp()

    def spt(self):
        return _spt()


@ray.remote
def task_omp():
    return _omp()


@pytest.fixture
def no_user_omp(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.mark.ray_compat
def test_an_actor_holding_no_cpu_runs_one_openmp_thread(no_user_omp, ray_start):
    # each handle held while its call runs: a handle dropped at once is "Lost reference to actor" in Ray
    a, b = Probe.remote(), Probe.options(num_cpus=0, num_gpus=1).remote()
    assert ray.get(a.omp.remote()) == "1"
    assert ray.get(b.omp.remote()) == "1"


@pytest.mark.ray_compat
def test_openmp_threads_are_the_whole_cpus_held(no_user_omp, ray_start):
    a, b = Probe.options(num_cpus=2).remote(), Probe.options(num_cpus=0.5).remote()
    assert ray.get(a.omp.remote()) == "2"
    assert ray.get(b.omp.remote()) == "1"
    assert ray.get(task_omp.options(num_cpus=3).remote()) == "3"
    assert ray.get(task_omp.remote()) == "1"


@pytest.mark.ray_compat
def test_the_users_setting_is_kept(no_user_omp, ray_start):
    env = {"env_vars": {"OMP_NUM_THREADS": "5"}}
    a = Probe.options(num_cpus=2, runtime_env=env).remote()
    assert ray.get(a.omp.remote()) == "5"
    assert ray.get(task_omp.options(runtime_env=env).remote()) == "5"


# setproctitle (vLLM names its workers with it) writes a process title over
# argv and the environment block that follows it unless SPT_NOENV is set:
# /proc/PID/environ of every worker would then read empty. Ray's raylet sets
# it for each Python worker (ray-project/ray#15061).


def _spt():
    with open("/proc/self/environ", "rb") as f:
        block = f.read().split(b"\0")
    return os.environ.get("SPT_NOENV"), b"SPT_NOENV=1" in block


@ray.remote
def task_spt():
    return _spt()


@pytest.mark.ray_compat
def test_workers_keep_their_environ_readable_under_setproctitle(ray_start):
    a = Probe.remote()
    assert ray.get(a.spt.remote()) == ("1", True)
    assert ray.get(task_spt.remote()) == ("1", True)


# Niceness and session: Ray's raylet starts each worker niced by its
# worker_niceness (RAY_worker_niceness, default 15) and in its own session,
# so the driver that feeds the workers runs first, and, where the kernel
# groups CPU time by session (autogroup, on by default in Debian's kernels),
# a driver and the workers of a cluster it started share one group. beam's
# workers each had a session of their own at nice 0: vLLM's engine and its
# two busy-polling CPU workers on 2 cores then ran at about half Ray's speed.


def _place():
    return {"nice": os.nice(0), "sid": os.getsid(0)}


@ray.remote
class Placed:
    def place(self):
        return _place()


@ray.remote
def task_place():
    return _place()


@pytest.mark.ray_compat
def test_workers_run_niced_by_15_below_the_driver(ray_start):
    want = min(os.nice(0) + 15, 19)
    a, b = Placed.remote(), Placed.options(num_cpus=0, num_gpus=1).remote()
    assert ray.get(a.place.remote())["nice"] == want
    assert ray.get(b.place.remote())["nice"] == want
    assert ray.get(task_place.remote())["nice"] == want


DRIVER = """
import json, os, ray
ray.init(num_cpus=1)

@ray.remote
def place():
    return {"nice": os.nice(0), "sid": os.getsid(0)}

@ray.remote
class A:
    def place(self):
        return {"nice": os.nice(0), "sid": os.getsid(0)}

a = A.remote()
out = {"driver": {"nice": os.nice(0), "sid": os.getsid(0)}, "task": ray.get(place.remote()),
       "actor": ray.get(a.place.remote())}
ray.shutdown()
print("PLACES " + json.dumps(out), flush=True)
"""


def _run_driver(tmp_path, **env):
    r = run_driver(DRIVER, env=env, unset=("RAY_ADDRESS", "BEAM_SOCKET"), timeout=300, check=True, cwd=tmp_path)
    line = [x for x in r.stdout.splitlines() if x.startswith("PLACES ")][-1]
    return json.loads(line[len("PLACES ") :])


@pytest.mark.ray_compat
def test_a_cluster_started_by_ray_init_shares_the_drivers_session(tmp_path):
    out = _run_driver(tmp_path)
    assert out["task"]["sid"] == out["driver"]["sid"], out
    assert out["actor"]["sid"] == out["driver"]["sid"], out
    assert out["actor"]["nice"] == min(out["driver"]["nice"] + 15, 19), out


def _threads_nice():
    """The main thread's niceness, the other threads' (as a set), and that of
    a thread the caller starts now."""
    nice = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        nice[int(tid)] = int(stat[stat.rindex(")") + 2 :].split()[16])
    main = nice.pop(os.getpid())
    started = []
    t = threading.Thread(target=lambda: started.append(os.nice(0)))
    t.start()
    t.join()
    return {"main": main, "others": sorted(set(nice.values())), "started": started[0]}


@ray.remote
class Threads:
    def nice(self):
        return _threads_nice()


@pytest.mark.ray_compat
def test_only_the_main_thread_is_niced_and_what_it_starts(ray_start):
    # Linux's nice is per thread; Ray's worker calls nice() at the end of its
    # core worker's setup, so the runtime's threads stay at the driver's
    # niceness and a thread the actor's code starts inherits the worker's
    drv = os.nice(0)
    want = min(drv + 15, 19)
    a = Threads.remote()
    got = ray.get(a.nice.remote())
    assert got["main"] == want, got
    assert got["started"] == want, got
    assert drv in got["others"], got


@pytest.mark.ray_compat
def test_ray_worker_niceness_sets_it(tmp_path):
    out = _run_driver(tmp_path, RAY_worker_niceness="3")
    assert out["task"]["nice"] == min(out["driver"]["nice"] + 3, 19), out
    assert out["actor"]["nice"] == min(out["driver"]["nice"] + 3, 19), out
