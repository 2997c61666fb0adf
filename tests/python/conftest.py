# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the end-to-end tests: a real beamd per test on its own socket,
with pretend GPUs, and a check that no beam process outlives its test.

The build is found through build/env.sh (scripts/test.sh sources it):
BEAM_BEAMD, BEAM_BEAMCTL and PYTHONPATH.
"""

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


@pytest.fixture
def beamd(monkeypatch):
    """A fresh beamd with 4 pretend GPUs and 8 CPUs; BEAM_SOCKET points at it."""
    d = Beamd()
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


@pytest.fixture
def ray_start(beamd):
    """ray.init() against the test's beamd."""
    import ray

    ray.init()
    yield ray
    ray.shutdown()


def run_driver(code, env=None, timeout=60):
    """Runs code as a separate driver process with this interpreter."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=full_env)
