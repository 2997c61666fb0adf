# SPDX-License-Identifier: Apache-2.0
"""The worker's environment as Ray makes it: OMP_NUM_THREADS is the whole
CPUs a task or actor holds (at least 1; 1 when it holds none), unless the
user set it (Ray's set_omp_num_threads_if_unset, Ray issue #6998). Without
it every torch worker starts one OpenMP thread per core of the machine,
and vLLM's CPU workers on one node ran ~100x slower than on Ray.

ray_compat: the same tests pass on real Ray 2.43."""

import os

import pytest

import ray


def _omp():
    return os.environ.get("OMP_NUM_THREADS")


@ray.remote
class Probe:
    def omp(self):
        return _omp()


@ray.remote
def task_omp():
    return _omp()


@pytest.fixture
def no_user_omp(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.mark.ray_compat
def test_an_actor_holding_no_cpu_runs_one_openmp_thread(no_user_omp, ray_start):
    assert ray.get(Probe.remote().omp.remote()) == "1"
    assert ray.get(Probe.options(num_cpus=0, num_gpus=1).remote().omp.remote()) == "1"


@pytest.mark.ray_compat
def test_openmp_threads_are_the_whole_cpus_held(no_user_omp, ray_start):
    assert ray.get(Probe.options(num_cpus=2).remote().omp.remote()) == "2"
    assert ray.get(Probe.options(num_cpus=0.5).remote().omp.remote()) == "1"
    assert ray.get(task_omp.options(num_cpus=3).remote()) == "3"
    assert ray.get(task_omp.remote()) == "1"


@pytest.mark.ray_compat
def test_the_users_setting_is_kept(no_user_omp, ray_start):
    env = {"env_vars": {"OMP_NUM_THREADS": "5"}}
    assert ray.get(Probe.options(num_cpus=2, runtime_env=env).remote().omp.remote()) == "5"
    assert ray.get(task_omp.options(runtime_env=env).remote()) == "5"
