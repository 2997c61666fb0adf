# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the end-to-end tests: a real beamd per test on its own socket,
with pretend GPUs, and a check that no beam process outlives its test.

The build is found through build/env.sh (scripts/test.sh sources it):
BEAM_BEAMD, BEAM_BEAMCTL and PYTHONPATH.

Differential runs: a test marked ``@pytest.mark.ray_compat`` uses only Ray's
public API and the fixtures ``ray_start`` / ``ray_env``, so the same body runs
against real Ray too. With BEAM_REAL_RAY=1 (scripts/test_real_ray.sh, with
Ray's own interpreter and beam off the path) those fixtures start real Ray
instead of a beamd: one instance per module, started again only when a test
asks for another shape, and the ``beamd`` fixture is refused.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# BEAM_REAL_RAY=1: the ray_compat tests run against real Ray (scripts/test_real_ray.sh)
REAL_RAY = os.environ.get("BEAM_REAL_RAY") == "1"

# the node every ray_start test gets, on beam and on Ray
DEFAULT_SHAPE = {"num_cpus": 8, "num_gpus": 4, "resources": None}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "ray_compat: uses only Ray's public API; scripts/test_real_ray.sh runs it against real Ray as well",
    )


def beam_processes(socket_path):
    """Pids of live processes started for the daemon at socket_path (workers
    carry BEAM_SOCKET in their environment)."""
    needle = f"BEAM_SOCKET={socket_path}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            pids.append(int(entry))
    return pids


def wait_until(pred, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


class Beamd:
    """A beamd started for one test."""

    def __init__(self, num_gpus=4, num_cpus=8, extra=()):
        exe = os.environ.get("BEAM_BEAMD")
        if not exe:
            pytest.fail("BEAM_BEAMD is not set: run the tests through scripts/test.sh (it sources build/env.sh)")
        self.dir = tempfile.mkdtemp(prefix="beamt-", dir="/tmp")
        self.socket = os.path.join(self.dir, "beamd.sock")
        self.log_path = os.path.join(self.dir, "beamd.log")
        self.args = [exe, "--socket", self.socket, "--num-gpus", str(num_gpus), "--num-cpus", str(num_cpus),
                     "--node-ip", "127.0.0.1", "--log-level", "debug", *extra]
        r, w = os.pipe()
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args + ["--ready-fd", str(w)], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, pass_fds=(w,))
        os.close(w)
        with os.fdopen(r, "rb") as ready:
            line = ready.readline()
        if not line.startswith(b"ready"):
            self.proc.wait(timeout=5)
            raise RuntimeError("beamd did not start:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def status(self):
        out = subprocess.run([os.environ["BEAM_BEAMCTL"], "--socket", self.socket, "status", "--json"],
                             capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode



@contextlib.contextmanager
def one_ray_for_module(num_cpus, num_gpus=0, resources=None):
    """ray.init() once, for a test module's fixture: against a fresh beamd of
    that size under beam's ray, or a local real Ray of the same size under
    Ray's. Yields the Beamd (None on Ray); at the end beamd must have exited
    cleanly and left no process behind."""
    import ray

    if getattr(ray, "__commit__", "") != "beam":
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources, include_dashboard=False)
        try:
            yield None
        finally:
            ray.shutdown()
        return
    extra = [a for k, v in (resources or {}).items() for a in ("--resource", f"{k}={v}")]
    d = Beamd(num_gpus=num_gpus, num_cpus=num_cpus, extra=extra)
    saved = {k: os.environ.get(k) for k in ("BEAM_SOCKET", "RAY_ADDRESS")}
    os.environ["BEAM_SOCKET"] = d.socket
    os.environ.pop("RAY_ADDRESS", None)
    try:
        ray.init()
        yield d
    finally:
        ray.shutdown()
        rc = d.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        left = beam_processes(d.socket)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert rc == 0, d.read_log()[-3000:]
        assert not left, f"processes left behind: {left}"

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
    rc = d.stop()
    leftover = beam_processes(d.socket)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(d.dir, ignore_errors=True)
    assert rc == 0, f"beamd exited with {rc}:\n{d.read_log()[-3000:]}"
    assert not leftover, f"beam processes left behind: {leftover}"


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
        ray.init(num_cpus=shape["num_cpus"], num_gpus=shape["num_gpus"], resources=shape["resources"],
                 include_dashboard=False, log_to_driver=True)
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
    return all(free.get(k, 0) >= v for k, v in total.items() if k in ("CPU", "GPU") or not k.startswith(
        ("node:", "memory", "object_store_memory")))


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
            extra = [a for name, amount in (resources or {}).items() for a in ("--resource", f"{name}={amount}")]
            gen = _beamd(monkeypatch, num_cpus=num_cpus, num_gpus=num_gpus, extra=extra)
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


def run_driver(code, env=None, timeout=60):
    """Runs code as a separate driver process with this interpreter."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=full_env)
