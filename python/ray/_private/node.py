# SPDX-License-Identifier: Apache-2.0
"""Finding a beamd, and starting a private one for a driver that found none.

A private daemon lives as long as its driver: it is started with
``--exit-with-parent`` and stopped by ``ray.shutdown()`` (or at exit).
"""

import os
import select
import shutil
import signal
import subprocess
import tempfile
import time


def beamd_path():
    """$BEAM_BEAMD, else the beamd built beside the _beam extension, else PATH."""
    env = os.environ.get("BEAM_BEAMD")
    if env:
        return env
    try:
        import _beam

        here = os.path.dirname(os.path.abspath(_beam.__file__))
        for cand in (os.path.join(here, "..", "beamd"), os.path.join(here, "beamd")):
            if os.access(cand, os.X_OK):
                return os.path.normpath(cand)
    except ImportError:
        pass
    return shutil.which("beamd")


def socket_answers(path):
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class PrivateDaemon:
    """A beamd started for one driver."""

    def __init__(self, num_cpus=None, num_gpus=None, resources=None, extra_args=()):
        exe = beamd_path()
        if not exe:
            raise ConnectionError(
                "beam: no beamd is running and none could be started: beamd was not found "
                "(set BEAM_BEAMD or put beamd on PATH)"
            )
        base = os.path.join(tempfile.gettempdir(), f"beam-{os.getuid()}")
        os.makedirs(base, mode=0o700, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=f"driver-{os.getpid()}-", dir=base)
        self.socket = os.path.join(self.dir, "beamd.sock")
        self.log_path = os.path.join(self.dir, "beamd.log")
        args = [exe, "--socket", self.socket, "--exit-with-parent", "--log-level", "warn"]
        if num_cpus is not None:
            args += ["--num-cpus", str(num_cpus)]
        if num_gpus is not None:
            args += ["--num-gpus", str(int(num_gpus))]
        for name, amount in (resources or {}).items():
            args += ["--resource", f"{name}={amount}"]
        args += list(extra_args)
        r, w = os.pipe()
        args += ["--ready-fd", str(w)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(w,), close_fds=True
            )
        os.close(w)
        try:
            self._wait_ready(r)
        finally:
            os.close(r)

    def _wait_ready(self, fd, timeout=30.0):
        deadline = time.monotonic() + timeout
        got = b""
        while b"\n" not in got:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise ConnectionError(f"beam: the private beamd did not start in {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 64)
                if not chunk:
                    break
                got += chunk
        if not got.startswith(b"ready"):
            self.proc.wait(timeout=5)
            with open(self.log_path, "rb") as f:
                tail = f.read()[-2000:].decode(errors="replace")
            raise ConnectionError(f"beam: the private beamd failed to start:\n{tail}")

    def stop(self, timeout=10.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
