# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the end-to-end tests: a real beamd per test on its own socket,
with pretend GPUs, and a check that no beam process outlives its test.

The build is found through build/env.sh (scripts/test.sh sources it):
BEAM_BEAMD, BEAM_BEAMCTL and PYTHONPATH.

Hermetic: the suite lives in a folder of its own (beamkit.suite): Ray's
temp folder, HOME, the runtime folder of beam's default socket and TMPDIR
point into it, per test, with RAY_ADDRESS / BEAM_SOCKET unset, so no test
sees a user's cluster, session files or token; at the end no process the
suite started may be left (they are killed and the run fails) and the folder
goes.

Differential runs: a test marked ``@pytest.mark.ray_compat`` uses only Ray's
public API and the fixtures ``ray_start`` / ``ray_env``, so the same body runs
against real Ray too. With BEAM_REAL_RAY=1 (scripts/test_real_ray.sh, with
Ray's own interpreter and beam off the path) those fixtures start real Ray
instead of a beamd: one instance per module, started again only when a test
asks for another shape, and the ``beamd`` fixture is refused.
"""

import itertools
import os
import sys

import pytest

from beamkit import suite
from beamkit.daemon import Beamd, Cluster, resource_args
from beamkit.procs import kill_all, wait_until

# BEAM_REAL_RAY=1: the ray_compat tests run against real Ray (scripts/test_real_ray.sh)
REAL_RAY = os.environ.get("BEAM_REAL_RAY") == "1"

# the node every ray_start test gets, on beam and on Ray
DEFAULT_SHAPE = {"num_cpus": 8, "num_gpus": 4, "resources": None}


ROOT = None  # the suite's folder (beamkit.suite.enter)
_test_no = itertools.count(1)


def pytest_configure(config):
    global ROOT
    config.addinivalue_line(
        "markers",
        "ray_compat: uses only Ray's public API; scripts/test_real_ray.sh runs it against real Ray as well",
    )
    ROOT = suite.enter()


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch):
    """Each test: its own Ray temp folder, HOME and runtime folder, no
    RAY_ADDRESS / BEAM_SOCKET unless the test sets them."""
    suite.test_env(monkeypatch, ROOT, next(_test_no))
    yield


def pytest_sessionfinish(session, exitstatus):
    """No process the suite started is left (its folder goes at exit)."""
    if ROOT is None:
        return
    if "ray" in sys.modules:
        sys.modules["ray"].shutdown()
    wait_until(lambda: not suite.leftovers(ROOT), 10, 0.1)
    left = suite.leftovers(ROOT)
    if left:
        what = suite.describe(left)
        kill_all(left)
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line("")
            tr.write_line(f"beam tests: processes left behind (killed): {what}", red=True)
        # on real Ray, its dashboard and runtime_env agents outlive
        # ray.shutdown() by design: killed, but they are not beam's to fail
        if not REAL_RAY:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def beamd(monkeypatch):
    """A fresh beamd with 4 pretend GPUs and 8 CPUs; BEAM_SOCKET points at it."""
    if REAL_RAY:
        pytest.fail("a ray_compat test must not use the beamd fixture (it runs on real Ray too)")
    yield from _beamd(monkeypatch)


def _beamd(monkeypatch, **shape):
    d = Beamd(**shape)
    monkeypatch.setenv("BEAM_SOCKET", d.socket)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield d
    import ray

    ray.shutdown()
    d.check_closed()


class _RealRay:
    """The one real Ray instance of a BEAM_REAL_RAY run, shared by the tests
    of a module while they ask for the same shape."""

    shape = None

    @classmethod
    def ensure(cls, shape):
        import ray

        if ray.is_initialized() and cls.shape == shape:
            return ray
        ray.shutdown()
        ray.init(
            num_cpus=shape["num_cpus"],
            num_gpus=shape["num_gpus"],
            resources=shape["resources"],
            include_dashboard=False,
            log_to_driver=True,
        )
        cls.shape = shape
        return ray

    @classmethod
    def settle(cls):
        """After a test: wait until its actors are gone and their resources
        back, so the next test on the shared instance starts clean."""
        import ray

        if not ray.is_initialized():
            cls.shape = None
            return
        if not ray.cluster_resources():
            cls.stop()  # its raylet died: the next test starts a fresh Ray
            return
        from ray.util.placement_group import placement_group_table

        if any(e["state"] != "REMOVED" for e in placement_group_table().values()):
            # removing a group whose actors are still going can crash Ray
            # 2.43's raylet (ReturnBundle check): start afresh instead
            cls.stop()
            return
        if not wait_until(lambda: _resources_back(ray), 20, 0.1):
            cls.stop()  # what the test left will not go: the next test starts a fresh Ray

    @classmethod
    def stop(cls):
        import ray

        ray.shutdown()
        cls.shape = None


def _resources_back(ray):
    total, free = ray.cluster_resources(), ray.available_resources()
    return all(
        free.get(k, 0) >= v
        for k, v in total.items()
        if k in ("CPU", "GPU") or not k.startswith(("node:", "memory", "object_store_memory"))
    )


@pytest.fixture(scope="module", autouse=True)
def _real_ray_module():
    """On BEAM_REAL_RAY runs: Ray is stopped at the end of each module."""
    yield
    if REAL_RAY:
        _RealRay.stop()


@pytest.fixture
def ray_env(request, monkeypatch):
    """A factory: ``ray = ray_env(num_cpus=0, num_gpus=0, resources={...})``
    gives an initialised ``ray`` on a node of that shape: a beamd for the test
    on beam (the ``beamd`` fixture's for the default shape), real Ray (shared
    while the shape is unchanged) when BEAM_REAL_RAY=1. One call per test."""
    gens = []

    def start(num_cpus=8, num_gpus=4, resources=None):
        shape = {"num_cpus": num_cpus, "num_gpus": num_gpus, "resources": resources}
        if REAL_RAY:
            return _RealRay.ensure(shape)
        if shape == DEFAULT_SHAPE:
            request.getfixturevalue("beamd")
        else:
            gen = _beamd(monkeypatch, num_cpus=num_cpus, num_gpus=num_gpus, extra=resource_args(resources))
            next(gen)
            gens.append(gen)
        import ray

        ray.init()
        return ray

    yield start
    if REAL_RAY:
        _RealRay.settle()
        return
    import ray

    ray.shutdown()
    for gen in gens:
        next(gen, None)


@pytest.fixture
def ray_start(ray_env):
    """ray.init() against the test's beamd (8 CPUs, 4 pretend GPUs); on a
    BEAM_REAL_RAY run, the module's real Ray of that shape."""
    return ray_env(**DEFAULT_SHAPE)


@pytest.fixture
def make_cluster(monkeypatch):
    """make_cluster(**Cluster kwargs) -> a started Cluster; the test process's
    own driver is pointed at its head (BEAM_SOCKET) and shut down before the
    daemons stop."""
    made = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def make(**kw):
        c = Cluster(**kw)
        made.append(c)
        monkeypatch.setenv("BEAM_SOCKET", c.head.socket)
        return c

    try:
        yield make
    finally:
        import ray

        ray.shutdown()
        errors = []
        for c in made:
            try:
                c.close()
            except AssertionError as e:
                errors.append(str(e))
        if errors:
            raise AssertionError("\n".join(errors))


@pytest.fixture
def cluster(make_cluster):
    """A head (127.0.0.1) and one member (127.0.0.2), 2 GPUs and 4 CPUs each."""
    return make_cluster()
