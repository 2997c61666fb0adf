# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of actors against a real beamd: the issue's program, GPU
assignment, runtime_env, import paths and cwd, pending actors, call order,
worker output on the driver's terminal, and named actors."""

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from beamkit.daemon import Beamd, run_driver
from beamkit.procs import alive, beam_processes, wait_gone, wait_until

# -- the issue's program ------------------------------------------------------


def test_issue_program(ray_start, beamd):
    ray = ray_start

    @ray.remote(num_gpus=1)
    class Counter:
        def __init__(self, start):
            self.n = start

        def add(self, k):
            self.n += k
            return self.n

        def slow(self, t):
            time.sleep(t)
            return t

    c = Counter.remote(10)
    assert ray.get(c.add.remote(5)) == 15
    refs = [c.slow.remote(0.01), c.slow.remote(0.01), c.slow.remote(3), c.slow.remote(3)]
    t0 = time.monotonic()
    ready, rest = ray.wait(refs, num_returns=2, timeout=5)
    assert time.monotonic() - t0 < 2.5
    assert ready == refs[:2]
    assert rest == refs[2:]
    assert ray.get(ready) == [0.01, 0.01]
    (actor,) = beamd.status()["actors"]
    assert actor["state"] == "ALIVE"
    assert actor["class_name"] == "Counter"
    pid = actor["pid"]
    assert alive(pid)
    ray.kill(c)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(refs[3], timeout=5)
    assert wait_gone(pid, 5)
    ray.shutdown()
    assert not ray.is_initialized()


# -- GPUs ---------------------------------------------------------------------


def test_gpu_assignment_four_actors(ray_start, beamd):
    ray = ray_start

    @ray.remote(num_gpus=1)
    class G:
        def info(self):
            ctx = ray.get_runtime_context()
            return (
                os.environ.get("CUDA_VISIBLE_DEVICES"),
                ray.get_gpu_ids(),
                ctx.get_accelerator_ids()["GPU"],
                os.getpid(),
            )

    actors = [G.remote() for _ in range(4)]
    infos = ray.get([a.info.remote() for a in actors])
    seen = []
    for cvd, gpu_ids, accel, _ in infos:
        assert len(accel) == 1
        assert all(isinstance(x, str) for x in accel)
        assert cvd == ",".join(accel)
        # the daemon was started without CUDA_VISIBLE_DEVICES: Ray gives ints then
        assert gpu_ids == [int(accel[0])]
        seen.append(accel[0])
    assert sorted(seen) == ["0", "1", "2", "3"]
    by_pid = {a["pid"]: a for a in beamd.status()["actors"]}
    for cvd, _, accel, pid in infos:
        assert by_pid[pid]["gpu_ids"] == accel
    assert ray.available_resources().get("GPU", 0) == 0
    assert ray.cluster_resources()["GPU"] == 4


def test_two_gpu_actors(ray_start):
    ray = ray_start

    @ray.remote(num_gpus=2)
    class G2:
        def info(self):
            return (
                os.environ.get("CUDA_VISIBLE_DEVICES"),
                sorted(ray.get_gpu_ids()),
                ray.get_runtime_context().get_accelerator_ids()["GPU"],
            )

    g2s = [G2.remote() for _ in range(2)]  # (a method holds its handle weakly, as Ray's)
    infos = ray.get([g.info.remote() for g in g2s])
    all_ids = []
    for cvd, gpu_ids, accel in infos:
        assert len(accel) == 2 and len(set(accel)) == 2
        assert cvd == ",".join(accel)
        assert gpu_ids == sorted(int(x) for x in accel)
        all_ids += accel
    assert sorted(all_ids) == ["0", "1", "2", "3"]


def test_concurrent_drivers(beamd, tmp_path):
    """Several drivers at once, each with its GPU actor: all finish, the
    GPUs are shared out without overlap, and nothing is left behind."""
    import concurrent.futures

    code = textwrap.dedent("""
        import os, time
        import ray
        ray.init()

        @ray.remote(num_gpus=1)
        class W:
            def __init__(self):
                self.n = 0

            def add(self):
                self.n += 1
                return self.n

            def gpus(self):
                return os.environ["CUDA_VISIBLE_DEVICES"]

        w = W.remote()
        assert ray.get([w.add.remote() for _ in range(50)]) == list(range(1, 51))
        print("GPU", ray.get(w.gpus.remote()), flush=True)
        # all four hold their actor at once (a driver that started late
        # would otherwise get the GPU of one already gone)
        open(os.path.join(os.environ["MET"], str(os.getpid())), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(os.environ["MET"])) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    """)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: run_driver(code, env={"MET": str(tmp_path)}), range(4)))
    gpus = []
    for out in outs:
        assert out.returncode == 0, out.stderr
        gpus += re.findall(r"^GPU (\S+)$", out.stdout, re.M)
    assert sorted(gpus) == ["0", "1", "2", "3"]
    assert wait_until(lambda: beam_processes(beamd.socket) == [], 5)
    assert wait_until(lambda: beamd.status()["resources_available"]["GPU"] == 4, 5)


def test_zero_gpu_actor_hides_gpus(ray_start):
    ray = ray_start

    @ray.remote(num_gpus=0)
    class NoGpu:
        def info(self):
            return (
                os.environ.get("CUDA_VISIBLE_DEVICES"),
                ray.get_gpu_ids(),
                ray.get_runtime_context().get_accelerator_ids(),
            )

    no_gpu = NoGpu.remote()
    cvd, gpu_ids, accel = ray.get(no_gpu.info.remote())
    assert cvd == ""
    assert gpu_ids == []
    assert accel["GPU"] == []
    assert set(accel) >= {"GPU", "TPU", "neuron_cores", "HPU", "NPU"}


@pytest.mark.ray_compat
def test_fractional_gpus_share_one_device(ray_start):
    ray = ray_start

    @ray.remote(num_gpus=0.5)
    class Half:
        def ids(self):
            return ray.get_runtime_context().get_accelerator_ids()["GPU"]

    a, b = Half.remote(), Half.remote()
    ia, ib = ray.get([a.ids.remote(), b.ids.remote()])
    assert len(ia) == 1 and ia == ib  # two halves pack onto one device
    # Ray's available_resources() lags the scheduler (resource reports), beam's does not
    assert wait_until(lambda: ray.available_resources().get("GPU") == 3, 10)


def test_runtime_env_applied_before_constructor(ray_start):
    ray = ray_start

    @ray.remote(num_gpus=0)
    class Env:
        def __init__(self):
            self.seen = (os.environ.get("BEAM_T_FOO"), os.environ.get("BEAM_T_BAR"))

        def get(self):
            return self.seen, os.environ.get("BEAM_T_FOO")

    a = Env.options(runtime_env={"env_vars": {"BEAM_T_FOO": "foo-value", "BEAM_T_BAR": ""}}).remote()
    assert ray.get(a.get.remote()) == (("foo-value", ""), "foo-value")


def test_job_runtime_env_inherited_and_overridden(beamd):
    import ray
    from ray.runtime_env import RuntimeEnv

    ray.init(runtime_env=RuntimeEnv(env_vars={"BEAM_T_JOB": "job", "BEAM_T_BOTH": "job"}))
    try:

        @ray.remote
        class Env:
            def get(self, *names):
                return [os.environ.get(n) for n in names]

        plain = Env.remote()
        over = Env.options(runtime_env={"env_vars": {"BEAM_T_BOTH": "actor"}}).remote()
        names = ("BEAM_T_JOB", "BEAM_T_BOTH")
        assert ray.get(plain.get.remote(*names)) == ["job", "job"]
        assert ray.get(over.get.remote(*names)) == ["job", "actor"]
    finally:
        ray.shutdown()


def test_runtime_env_pythonpath_adds_to_import_path(beamd, tmp_path):
    """vLLM's tests: ray.init(runtime_env={"env_vars": {"PYTHONPATH": dir}}).
    The worker can import from dir and still imports ray."""
    import ray

    (tmp_path / "beam_t_pp_mod.py").write_text("VALUE = 'from pythonpath dir'\n")
    ray.init(runtime_env={"env_vars": {"PYTHONPATH": str(tmp_path)}})
    try:

        @ray.remote
        class Imp:
            def get(self):
                import beam_t_pp_mod

                return beam_t_pp_mod.VALUE, os.environ["PYTHONPATH"].split(os.pathsep)[0]

        imp = Imp.remote()
        assert ray.get(imp.get.remote(), timeout=10) == ("from pythonpath dir", str(tmp_path))
    finally:
        ray.shutdown()


def test_runtime_env_cuda_visible_devices_does_not_override_assignment(ray_start):
    ray = ray_start

    @ray.remote(num_gpus=1)
    class G:
        def info(self):
            return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_runtime_context().get_accelerator_ids()["GPU"]

    g = G.options(runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "7"}}).remote()
    cvd, accel = ray.get(g.info.remote(), timeout=10)
    assert cvd == ",".join(accel)


def test_noset_cuda_visible_devices(monkeypatch):
    """With RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES the worker keeps the
    daemon's CUDA_VISIBLE_DEVICES; its accelerator ids are still reported."""
    import ray

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    d = Beamd()
    monkeypatch.setenv("BEAM_SOCKET", d.socket)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # the driver's own environment must not be what the worker reports
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "driver-value")
    try:
        ray.init()

        @ray.remote(num_gpus=1)
        class W:
            def info(self):
                return (os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_runtime_context().get_accelerator_ids()["GPU"])

        noset = W.options(runtime_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}).remote()
        plain = W.remote()
        cvd, accel = ray.get(noset.info.remote())
        assert cvd == "0,1,2,3"
        assert len(accel) == 1 and accel[0] in {"0", "1", "2", "3"}
        cvd2, accel2 = ray.get(plain.info.remote())
        assert cvd2 == ",".join(accel2) and accel2 != accel
    finally:
        ray.shutdown()
        rc = d.stop()
        left = beam_processes(d.socket)
        for pid in left:
            os.kill(pid, 9)
    assert rc == 0
    assert not left


# -- import path and cwd --------------------------------------------------------


def test_worker_imports_module_from_driver_script_folder(beamd, tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "beam_t_helper.py").write_text(
        textwrap.dedent("""
        def where():
            return "helper:" + __file__

        class Remote:
            def hello(self):
                return "hello from helper class"
    """)
    )
    (app / "main.py").write_text(
        textwrap.dedent("""
        import ray
        import beam_t_helper

        ray.init()

        @ray.remote
        class UsesHelper:
            def run(self):
                import beam_t_helper as h
                return h.where()

        a = UsesHelper.remote()
        print("A", ray.get(a.run.remote()))
        # a class defined in the module itself is pickled by reference
        b = ray.remote(beam_t_helper.Remote).remote()
        print("B", ray.get(b.hello.remote()))
        ray.shutdown()
    """)
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run(
        [sys.executable, str(app / "main.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(elsewhere),
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "A helper:" + str(app / "beam_t_helper.py") in lines
    assert "B hello from helper class" in lines


def test_worker_cwd_is_drivers(ray_start, tmp_path, monkeypatch):
    ray = ray_start
    monkeypatch.chdir(tmp_path)

    @ray.remote
    class Cwd:
        def cwd(self):
            return os.getcwd()

    cwd = Cwd.remote()
    assert ray.get(cwd.cwd.remote()) == str(tmp_path)


# -- scheduling -----------------------------------------------------------------


def test_fifth_gpu_actor_pends_until_one_is_killed(ray_start, beamd):
    ray = ray_start

    @ray.remote(num_gpus=1)
    class G:
        def ids(self):
            return ray.get_runtime_context().get_accelerator_ids()["GPU"]

    four = [G.remote() for _ in range(4)]
    ids = ray.get([a.ids.remote() for a in four])
    fifth = G.remote()
    ready_ref = fifth.__ray_ready__.remote()
    ready, rest = ray.wait([ready_ref], timeout=0.5)
    assert ready == [] and rest == [ready_ref]
    by_id = {a["actor_id"]: a for a in beamd.status()["actors"]}
    assert len(by_id) == 5
    assert by_id[fifth._actor_id.hex()]["state"] == "PENDING_CREATION"
    assert by_id[fifth._actor_id.hex()]["gpu_ids"] == []
    assert all(by_id[a._actor_id.hex()]["state"] == "ALIVE" for a in four)
    ray.kill(four[2])
    ready, rest = ray.wait([ready_ref], timeout=5)
    assert ready == [ready_ref]
    assert ray.get(ready_ref) is True
    assert ray.get(fifth.ids.remote()) == ids[2]


@pytest.mark.ray_compat
def test_calls_run_in_submission_order(ray_start):
    ray = ray_start

    @ray.remote
    class Log:
        def __init__(self):
            self.seen = []

        def add(self, i):
            self.seen.append(i)
            return len(self.seen)

        def get(self):
            return self.seen

    a = Log.remote()
    refs = [a.add.remote(i) for i in range(200)]
    log = a.get.remote()
    assert ray.get(refs) == list(range(1, 201))
    assert ray.get(log) == list(range(200))


@pytest.mark.ray_compat
def test_methods_with_kwargs_and_builtins(ray_start):
    ray = ray_start

    @ray.remote
    class K:
        def __init__(self, a, *, b=2):
            self.base = a * 10 + b

        def f(self, x, y=0, **kw):
            return self.base, x, y, sorted(kw.items())

    k = K.remote(1, b=3)
    assert ray.get(k.f.remote(5, y=6, z=7)) == (13, 5, 6, [("z", 7)])
    assert ray.get(k.__ray_ready__.remote()) is True
    assert ray.get(k.__ray_call__.remote(lambda self, n: self.base + n, 100)) == 113
    with pytest.raises(AttributeError):
        k.no_such_method
    with pytest.raises(TypeError):
        k.f(1)


# -- worker output ----------------------------------------------------------------


def test_worker_output_reaches_driver_prefixed(beamd):
    out = run_driver(
        textwrap.dedent("""
        import os, sys, time
        import ray
        ray.init()

        @ray.remote
        class Printer:
            def say(self):
                print("to-stdout-1")
                print("to-stderr-1", file=sys.stderr)
                sys.stdout.flush(); sys.stderr.flush()
                return os.getpid()

        p = Printer.remote()
        pid = ray.get(p.say.remote())
        print("PID", pid, flush=True)
        time.sleep(0.3)  # output travels on its own path; give it a moment
        ray.shutdown()
    """)
    )
    assert out.returncode == 0, out.stderr
    pid = int(re.search(r"^PID (\d+)$", out.stdout, re.M).group(1))
    assert f"(Printer pid={pid}) to-stdout-1\n" in out.stdout
    assert f"(Printer pid={pid}) to-stderr-1\n" in out.stderr
    assert "to-stderr-1" not in out.stdout
    assert "to-stdout-1" not in out.stderr


def test_log_to_driver_false_silences_workers(beamd):
    out = run_driver(
        textwrap.dedent("""
        import time
        import ray
        ray.init(log_to_driver=False)

        @ray.remote
        class Printer:
            def say(self):
                print("should-not-appear", flush=True)
                return 1

        printer = Printer.remote()
        assert ray.get(printer.say.remote()) == 1
        time.sleep(0.3)
        print("done")
        ray.shutdown()
    """)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"
    assert "should-not-appear" not in out.stderr


# -- named actors -------------------------------------------------------------------


def test_named_actors(ray_start, beamd):
    ray = ray_start

    @ray.remote
    class Named:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v

        def name(self):
            return ray.get_runtime_context().get_actor_name()

    a = Named.options(name="beam-t-named").remote(1)
    assert ray.get(a.get.remote()) == 1
    with pytest.raises(ValueError):
        Named.options(name="beam-t-named").remote(2)
    b = ray.get_actor("beam-t-named")
    assert b == a
    assert ray.get(b.get.remote()) == 1
    assert ray.get(b.name.remote()) == "beam-t-named"
    with pytest.raises(ValueError):
        ray.get_actor("beam-t-no-such-actor")
    (entry,) = [x for x in beamd.status()["actors"] if x["state"] == "ALIVE"]
    assert entry["name"] == "beam-t-named"
    # get_if_exists returns the live one instead of failing
    c = Named.options(name="beam-t-named", get_if_exists=True).remote(3)
    assert ray.get(c.get.remote()) == 1
    # once it is dead the name is free again
    ray.kill(a)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(b.get.remote(), timeout=5)
    assert wait_until(lambda: _name_free(ray, "beam-t-named"), 5)
    d = Named.options(name="beam-t-named").remote(4)
    assert ray.get(d.get.remote()) == 4


def _name_free(ray, name):
    try:
        ray.get_actor(name)
    except ValueError:
        return True
    return False


def test_nested_actor_output_has_one_prefix(beamd):
    out = run_driver(
        textwrap.dedent("""
        import os, time
        import ray
        ray.init()

        @ray.remote
        class Child:
            def hi(self):
                print("child-line", flush=True)
                return os.getpid()

        @ray.remote
        class Parent:
            def make(self):
                self.c = Child.remote()
                return ray.get(self.c.hi.remote())

        parent = Parent.remote()
        print("PID", ray.get(parent.make.remote()), flush=True)
        time.sleep(0.3)
        ray.shutdown()
    """)
    )
    assert out.returncode == 0, out.stderr
    pid = int(re.search(r"^PID (\d+)$", out.stdout, re.M).group(1))
    assert f"\n(Child pid={pid}) child-line\n" in "\n" + out.stdout


def test_named_actor_visible_to_another_driver(ray_start):
    ray = ray_start

    @ray.remote
    class Shared:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n

    # named actors are scoped per namespace, and each driver has its own
    # anonymous one unless it names one (as in Ray)
    s = Shared.options(name="beam-t-shared", namespace="beam-t").remote()
    assert ray.get(s.bump.remote()) == 1
    out = run_driver(
        textwrap.dedent("""
        import ray
        ray.init(namespace="beam-t")
        h = ray.get_actor("beam-t-shared")
        print("GOT", ray.get(h.bump.remote()))
    """)
    )
    assert out.returncode == 0, out.stderr
    assert "GOT 2" in out.stdout.splitlines()
    # the other driver's exit did not take the actor (it does not own it)
    assert ray.get(s.bump.remote(), timeout=5) == 3


def test_remote_function_runs_and_its_worker_is_reused(ray_start, beamd):
    ray = ray_start

    @ray.remote
    def double(x):
        return x * 2, os.getpid()

    value, pid = ray.get(double.remote(21), timeout=10)
    assert value == 42
    # the worker went idle into beamd's task worker pool: the next task takes it
    assert ray.get(double.remote(1), timeout=10) == (2, pid)
    refs = [double.remote(i) for i in range(3)]
    assert [v for v, _ in ray.get(refs, timeout=10)] == [0, 2, 4]


def test_dropped_handle_of_pending_actor_still_runs_its_calls(ray_start, beamd):
    import gc

    ray = ray_start

    @ray.remote(num_gpus=1)
    class G:
        def pid(self):
            return os.getpid()

    four = [G.remote() for _ in range(4)]
    ray.get([g.pid.remote() for g in four])
    late = G.remote()
    late_pid = late.pid.remote()
    del late
    gc.collect()
    ray._private.worker.runtime().client.flush()
    assert ray.wait([late_pid], timeout=0.3) == ([], [late_pid])
    ray.kill(four[0])
    pid = ray.get(late_pid, timeout=5)
    assert wait_gone(pid, 5)  # and then it stops


def test_long_class_name_output_prefix(beamd):
    out = run_driver(
        textwrap.dedent("""
        import os, time
        import ray
        ray.init()

        def hi(self):
            print("long-name-line", flush=True)
            return os.getpid()

        Long = ray.remote(type("L" * 200, (), {"hi": hi}))
        long_named = Long.remote()
        print("PID", ray.get(long_named.hi.remote()), flush=True)
        time.sleep(0.3)
        ray.shutdown()
    """)
    )
    assert out.returncode == 0, out.stderr
    pid = int(re.search(r"^PID (\d+)$", out.stdout, re.M).group(1))
    assert f"({'L' * 200} pid={pid}) long-name-line" in out.stdout.splitlines()


def test_subprocess_of_an_actor_connects_back(ray_start, beamd):
    """vLLM in a Ray actor sets RAY_ADDRESS to gcs_address and spawns
    processes that call ray.init(): they join the same node."""
    ray = ray_start

    @ray.remote
    class Spawner:
        def run(self):
            import subprocess
            import sys

            env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address)
            code = (
                "import ray; ray.init(); print(ray.get_runtime_context().get_node_id()); "
                "print(ray.get_runtime_context().get_actor_id()); "
                "h = ray.get_actor('beam-t-spawner', namespace='beam-t'); print(ray.get(h.ping.remote()))"
            )
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)
            return out.returncode, out.stdout.split(), out.stderr[-2000:]

        def ping(self):
            return "spawner-pong"

    # run() blocks the actor, so ping must go to a second one
    s = Spawner.remote()
    named = Spawner.options(name="beam-t-spawner", namespace="beam-t").remote()
    assert ray.get(named.ping.remote()) == "spawner-pong"
    rc, lines, err = ray.get(s.run.remote(), timeout=30)
    assert rc == 0, err
    assert lines == [beamd.status()["node_id"], "None", "spawner-pong"]
