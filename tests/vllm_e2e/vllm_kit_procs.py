# SPDX-License-Identifier: Apache-2.0
"""The processes of one kit run. Every process the run starts (`ray start`
and its daemons and workers, the driver, vLLM's engine process) is put in a
pids cgroup of its own (as root: cgroup v1's pids controller or cgroup v2),
so a process that was re-parented or that rewrote its title (vLLM and Ray
both call setproctitle) is still found. Used to kill one vLLM worker on
purpose, to check that a run left nothing behind, and to stop real Ray's
processes of this run only (Ray's own `ray stop` stops every Ray on the
machine)."""

import os
import signal
import sys
import uuid

# beamkit (tests/python) needs only the standard library: the one copy of
# the /proc and polling helpers
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from beamkit import procs as _bk  # noqa: E402
from beamkit.procs import alive, free_port, last_cpu, wait_until  # noqa: E402, F401

ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")


def _cgroup_root():
    for root in ROOTS:
        if os.path.isfile(os.path.join(root, "cgroup.procs")) and os.access(root, os.W_OK):
            return root
    return None


def available():
    return _cgroup_root() is not None


class RunGroup:
    """A cgroup holding one run's processes. `preexec` (a subprocess
    preexec_fn) moves the child into it before exec; its children follow."""

    def __init__(self, name="vllm-kit"):
        root = _cgroup_root()
        if root is None:
            raise RuntimeError("no writable pids cgroup (the kit runs as root)")
        self.path = os.path.join(root, f"{name}-{uuid.uuid4().hex[:8]}")
        os.mkdir(self.path)

    @classmethod
    def at(cls, path):
        """The group made by another process (kit.Run passes its path on)."""
        group = cls.__new__(cls)
        group.path = path
        return group

    def preexec(self):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def pids(self):
        """Live processes of the run (zombies not yet reaped are not counted)."""
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except OSError:
            return []
        return [p for p in pids if alive(p)]

    def kill_all(self, grace=5.0):
        """SIGTERM, then SIGKILL after grace, every process of the run."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.pids():
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            if wait_until(lambda: not self.pids(), grace):
                return

    def remove(self):
        self.kill_all()
        wait_until(lambda: self._rmdir(), 10.0)

    def _rmdir(self):
        try:
            os.rmdir(self.path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False


def cmdline(pid):
    """pid's command line as one string ('' if it is gone)."""
    return b" ".join(_bk.cmdline(pid)).decode(errors="replace").strip()


def cpu_seconds(pid):
    """CPU seconds a live process's threads have run (0.0 if unreadable)."""
    return (_bk.cpu_ns(pid) or 0) / 1e9


def is_vllm_worker(pid):
    """A vLLM worker actor: titled by Ray (ray::RayWorkerProc.run) or by vLLM
    (VLLM::Worker_TP0 on beam, whose worker keeps the title vLLM gives it),
    or a ray worker process that loaded torch."""
    cmd = cmdline(pid)
    if "RayWorkerProc" in cmd or cmd.startswith("VLLM::Worker"):
        return True
    if "ray._worker" not in cmd and "default_worker.py" not in cmd:
        return False
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "libtorch" in f.read()
    except OSError:
        return False
