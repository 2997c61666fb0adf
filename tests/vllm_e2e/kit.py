# SPDX-License-Identifier: Apache-2.0
"""The kit's moving parts, shared by its tests and bench/bench_vllm.py: a
node started with `ray start` from one of the kit's venvs (beam's or real
Ray's) in a folder of its own, the driver run of generate.py, and the
check that a run left no process behind.

Every process a node or driver starts lives in the run's pids cgroup
(vllm_kit_procs.RunGroup), whatever its title or parent. Nothing is shared
with a user's cluster: HOME, RAY_TMPDIR and the token are the run's own, and
RAY_ADDRESS is unset."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vllm_kit_procs as procs  # noqa: E402

# vLLM's CPU build, as a user runs it on a small machine
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}

DROP = (
    "RAY_ADDRESS",
    "BEAM_SOCKET",
    "BEAM_BEAMD",
    "BEAM_BEAMCTL",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "LD_PRELOAD",
    "OMP_NUM_THREADS",
)


def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def variant_of(venv):
    """'beam' or 'ray': which `ray` the venv holds."""
    r = subprocess.run([venv_python(venv), "-c", "import _beam"], capture_output=True, timeout=120)
    return "beam" if r.returncode == 0 else "ray"


class Run:
    """One run: its cgroup, its temp folders, its environment."""

    def __init__(self, venv, tag="run"):
        self.venv = venv
        self.variant = variant_of(venv)
        self.group = procs.RunGroup(f"vllm-kit-{tag}")
        self.dirs = []
        self.procs = []
        self.shm_before = _vllm_shm()

    def tmpdir(self, prefix):
        d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # short: unix socket paths live below it
        self.dirs.append(d)
        return d

    def env(self, home=None, tmp=None, **extra):
        env = {k: v for k, v in os.environ.items() if k not in DROP and not k.startswith("BEAM_")}
        env.update(VLLM_ENV)
        env["HOME"] = home or self.tmpdir("vk-home-")
        env["RAY_TMPDIR"] = tmp or self.tmpdir("vk-rt-")
        env["PATH"] = os.path.join(self.venv, "bin") + os.pathsep + env.get("PATH", "")
        env["VLLM_KIT_CGROUP"] = self.group.path
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def popen(self, argv, env, wrap=(), **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen(list(wrap) + list(argv), env=env, preexec_fn=self.group.preexec, text=True, **kw)
        self.procs.append(p)
        return p

    def run(self, argv, env, wrap=(), timeout=600, **kw):
        p = self.popen(argv, env, wrap, **kw)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"{argv} ran past {timeout} s:\n{out[-4000:]}\n{err[-8000:]}")
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def ray(self, *args, env, wrap=(), timeout=120):
        return self.run([os.path.join(self.venv, "bin", "ray"), *args], env, wrap, timeout=timeout)

    def start_head(self, env, num_gpus=2, num_cpus=2, wrap=(), extra=()):
        # a port of its own unless told: a user's cluster may hold Ray's 6379
        port = [] if any(a.startswith("--port") for a in extra) else [f"--port={procs.free_port('')}"]
        args = ["start", "--head", f"--num-gpus={num_gpus}", f"--num-cpus={num_cpus}", *port, *extra]
        if self.variant == "ray":
            args += ["--include-dashboard=false", "--disable-usage-stats"]
        r = self.ray(*args, env=env, wrap=wrap)
        assert r.returncode == 0, f"ray start --head failed:\n{r.stdout}\n{r.stderr}"
        return r

    def generate(self, model, env, *args, wrap=(), timeout=900):
        """generate.py's JSON result (its last stdout line); fails with its output."""
        r = self.run(
            [venv_python(self.venv), os.path.join(HERE, "generate.py"), model, *args], env, wrap, timeout=timeout
        )
        if r.returncode != 0:
            raise AssertionError(f"generate.py {args} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-12000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def stop(self, env, wrap=()):
        """Stops the node as its user would: `ray stop` on beam; on real Ray,
        this run's processes only (Ray's `ray stop` stops every Ray of the
        machine, the differential test run's too)."""
        if self.variant == "beam":
            r = self.ray("stop", env=env, wrap=wrap)
            assert r.returncode == 0, r.stdout + r.stderr
        else:
            self.group.kill_all(grace=10.0)

    def left(self):
        """The run's processes still alive (this process is not in the group)."""
        return [(p, procs.cmdline(p)[:120]) for p in self.group.pids()]

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        self.group.remove()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        # vLLM's CPU build leaves its shared-memory segments behind when its
        # workers are stopped (on real Ray as on beam: 2 "<pid>-tp:..-cpushm_N"
        # and 3 torch "psm_*" a run); the next run whose engine gets a pid
        # used before then fails with "create shm in SHMManager failed.
        # errno: 17". The run removes the ones it made.
        for name in _vllm_shm() - self.shm_before:
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def _vllm_shm():
    """The names in /dev/shm of vLLM's CPU communicator and torch's shared
    memory manager."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return set()
    return {n for n in names if "cpushm" in n or n.startswith("psm_")}


def make_model(venv, out):
    r = subprocess.run(
        [venv_python(venv), os.path.join(HERE, "make_model.py"), out],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **VLLM_ENV},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out
