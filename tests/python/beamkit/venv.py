# SPDX-License-Identifier: Apache-2.0
"""A virtual environment with beam pip-installed into it, made once per test
session (the first test that asks builds it; the folder goes at exit), and
the helpers to run `ray` and python from it as a user would: no PYTHONPATH,
no BEAM_* variables, a HOME and Ray temp folder of the test's own.

pip reaches PyPI (or its cache) for scikit-build-core (build isolation) and
cloudpickle; a machine that cannot gets these tests skipped with pip's error.
"""

import atexit
import os
import shutil
import subprocess
import tempfile
import textwrap

import pytest

from . import REPO
from .procs import alive

PYTHON = os.environ.get("BEAM_PYTHON", "/usr/bin/python3")

_made = {}


def _cleanup():
    for d in _made.pop("dirs", []):
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


def _tmpdir(prefix):
    # under the temp folder (the suite's own, short: the unix sockets of `ray start` live below it)
    d = tempfile.mkdtemp(prefix=prefix)
    _made.setdefault("dirs", []).append(d)
    return d


def _pip(venv, *args, timeout=600):
    r = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
    )
    return r


def new_venv(python=PYTHON):
    venv = os.path.join(_tmpdir("beam-venv-"), "v")
    r = subprocess.run([python, "-m", "venv", venv], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"cannot make a venv with {python}: {r.stderr.strip()}")
    return venv


def installed_venv():
    """`python3 -m venv V && V/bin/pip install .` from the repository, once."""
    if "venv" not in _made:
        venv = new_venv()
        r = _pip(venv, "install", REPO)
        if r.returncode != 0:
            _made["venv"] = RuntimeError(f"pip install . failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        else:
            _made["venv"] = venv
    if isinstance(_made["venv"], Exception):
        pytest.fail(str(_made["venv"]))
    return _made["venv"]


def built_wheel():
    """`pip wheel . --no-deps` once: the wheel's path."""
    if "wheel" not in _made:
        out = _tmpdir("beam-wheel-")
        r = subprocess.run(
            [PYTHON, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps", "-w", out, REPO],
            capture_output=True,
            text=True,
            timeout=600,
            env=clean_env(),
        )
        wheels = [f for f in os.listdir(out) if f.endswith(".whl")]
        if r.returncode != 0 or len(wheels) != 1:
            _made["wheel"] = RuntimeError(f"pip wheel . failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        else:
            _made["wheel"] = os.path.join(out, wheels[0])
    if isinstance(_made["wheel"], Exception):
        pytest.fail(str(_made["wheel"]))
    return _made["wheel"]


# The sanitizer pass (BEAM_SANITIZE=1 scripts/test.sh) preloads libasan into
# every Python; the venv tests exercise the pip-built wheel, not that build,
# so that pass skips them (the plain pass runs them).
SANITIZER_PASS = "libasan" in os.environ.get("LD_PRELOAD", "")
skip_in_sanitizer_pass = pytest.mark.skipif(
    SANITIZER_PASS, reason="tests the pip-built wheel, not the sanitizer build (the plain pass runs it)"
)


def clean_env(**extra):
    """The environment of a user's shell: none of the build tree's settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BEAM_", "RAY_", "PYTHON", "ASAN_", "UBSAN_")) and k not in ("VIRTUAL_ENV", "LD_PRELOAD")
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Node:
    """One node's view: its own HOME (~/.ray/auth_token) and Ray temp
    folder, and the venv's programs."""

    def __init__(self, venv, wrap=(), **env):
        self.venv = venv
        self.wrap = list(wrap)
        self.home = _tmpdir("beam-home-")
        self.tmp = _tmpdir("beam-rt-")
        self.env = clean_env(HOME=self.home, RAY_TMPDIR=self.tmp, **env)

    def bin(self, name):
        return os.path.join(self.venv, "bin", name)

    def run(self, *args, timeout=60, env=None, cwd=None):
        e = dict(self.env, **(env or {}))
        return subprocess.run(
            self.wrap + list(args), capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd or self.home
        )

    def ray(self, *args, **kw):
        return self.run(self.bin("ray"), *args, **kw)

    def popen(self, *args, env=None):
        e = dict(self.env, **(env or {}))
        return subprocess.Popen(
            self.wrap + list(args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=e,
            cwd=self.home,
        )

    def session(self):
        import json

        try:
            with open(os.path.join(self.tmp, "ray", "beam_node.json")) as f:
                return json.load(f)
        except OSError:
            return None


class BuildNode(Node):
    """A node whose `ray` is this build's (python -m ray.scripts.scripts).
    With uid, it runs as that user (setpriv, no supplementary groups), its
    HOME and Ray temp folder that user's; with tmp, its Ray temp folder is
    that one (two users sharing a /tmp, say)."""

    def __init__(self, uid=None, tmp=None, **env):
        keep = {
            k: v
            for k, v in os.environ.items()
            if k in ("PYTHONPATH", "BEAM_BEAMD", "LD_PRELOAD") or k.startswith(("ASAN_", "UBSAN_"))
        }
        wrap = () if uid is None else ("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups")
        super().__init__(venv=None, wrap=wrap, **keep, **env)
        if tmp is not None:
            self.tmp = self.env["RAY_TMPDIR"] = tmp
        if uid is not None:
            os.chown(self.home, uid, uid)
            if tmp is None:
                os.chown(self.tmp, uid, uid)
        self.started = []

    def ray(self, *args, **kw):
        return self.run(PYTHON, "-m", "ray.scripts.scripts", *args, **kw)

    def ray_popen(self, *args, env=None):
        return self.popen(PYTHON, "-m", "ray.scripts.scripts", *args, env=env)

    def python(self, code, env=None, timeout=60):
        return self.run(PYTHON, "-c", textwrap.dedent(code), env=env, timeout=timeout)

    def start(self, *args, env=None):
        out = self.ray("start", *args, env=env)
        if out.returncode == 0:
            self.started.append(self.session()["pid"])
        return out

    def stop(self):
        out = self.ray("stop")
        for pid in self.started:
            assert not alive(pid), f"beamd {pid} still runs after ray stop"
        return out


def read_until(proc, text, timeout=60):
    """proc's output up to and including the line containing text; fails
    with what it printed if proc exits or the time runs out first."""
    import select
    import time

    fd = proc.stdout.fileno()
    buf = getattr(proc, "_beam_buf", b"")
    deadline = time.monotonic() + timeout
    want = text.encode()
    while True:
        i = buf.find(want)
        if i >= 0:
            j = buf.find(b"\n", i)
            if j >= 0:
                proc._beam_buf = buf[j + 1 :]
                return buf[: j + 1].decode(errors="replace")
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
    proc._beam_buf = buf
    raise AssertionError(f"no {text!r} from {proc.args}:\n{buf.decode(errors='replace')}")
