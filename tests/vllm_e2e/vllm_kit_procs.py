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
import time
import uuid

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
        return [p for p in pids if state(p) not in ("Z", "X")]

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


def wait_until(cond, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def cpu_seconds(pid):
    """User + system CPU seconds of a live process (all its threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


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
