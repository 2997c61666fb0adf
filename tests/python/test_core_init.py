# SPDX-License-Identifier: Apache-2.0
"""ray.init / ray.shutdown / is_initialized, private daemons, and the
runtime context, against real beamd processes."""

import os
import re
import textwrap

import pytest

from beamkit.daemon import run_driver
from beamkit.procs import alive, beam_processes, processes, wait_until


def _no_daemon_env(tmp_path):
    """The variables of an environment in which no beamd answers: BEAM_SOCKET
    names a path in a fresh folder (the drivers run with RAY_ADDRESS unset)."""
    env = {"BEAM_SOCKET": str(tmp_path / "nothing-here" / "beamd.sock")}
    # the drivers below may end with os._exit or SIGKILL, which drop what
    # print() left in a pipe's buffer: the lines the tests read must be out
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- import and is_initialized ----------------------------------------------------


def test_import_starts_nothing(tmp_path):
    env = _no_daemon_env(tmp_path)
    out = run_driver(
        """
        import os, threading
        import ray
        from ray.util import placement_group_table
        from ray.util.placement_group import PlacementGroup
        from ray._private.state import available_resources_per_node
        from ray.actor import ActorHandle
        from ray.types import ObjectRef
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from ray.runtime_env import RuntimeEnv
        print("INIT", ray.is_initialized())
        print("THREADS", threading.active_count())
        me = str(os.getpid())
        children = []
        for e in os.listdir("/proc"):
            if e.isdigit():
                try:
                    with open(f"/proc/{e}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[1] == me:
                            children.append(e)
                except OSError:
                    pass
        print("CHILDREN", len(children))
        print("INIT", ray.is_initialized())
    """,
        env,
        unset=("RAY_ADDRESS",),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["INIT False", "THREADS 1", "CHILDREN 0", "INIT False"]
    assert not os.path.exists(os.path.dirname(env["BEAM_SOCKET"]))
    assert processes(env["BEAM_SOCKET"], "cmdline") == []


def test_is_initialized_false_after_shutdown(beamd):
    import ray

    assert not ray.is_initialized()
    ray.init()
    assert ray.is_initialized()
    ray.shutdown()
    assert not ray.is_initialized()
    ray.shutdown()  # twice is fine
    assert not ray.is_initialized()


def test_init_twice(beamd):
    import ray

    ctx = ray.init()
    try:
        with pytest.raises(RuntimeError, match="ray.init twice"):
            ray.init()
        again = ray.init(ignore_reinit_error=True)
        assert again["node_id"] == ctx["node_id"]
        assert ray.is_initialized()
    finally:
        ray.shutdown()


def test_init_context(beamd):
    import ray

    ctx = ray.init()
    try:
        assert re.fullmatch(r"[0-9a-f]{56}", ctx["node_id"])
        assert ctx["node_id"] == beamd.status()["node_id"]
        assert ctx["node_ip_address"] == "127.0.0.1"
        assert ctx.node_id == ctx["node_id"]
        assert ray.get_runtime_context().get_node_id() == ctx["node_id"]
    finally:
        ray.shutdown()


def test_init_again_after_shutdown(beamd):
    import ray

    ray.init()
    first = ray.put("first session")
    assert ray.get(first) == "first session"
    ray.shutdown()
    ray.init()
    try:
        assert ray.get(ray.put("second session")) == "second session"
    finally:
        ray.shutdown()


def test_unknown_kwarg_raises_runtime_error(beamd):
    import ray

    with pytest.raises(RuntimeError, match="Unknown keyword argument"):
        ray.init(not_a_ray_option=1)
    assert not ray.is_initialized()


def test_connecting_with_resources_to_existing_daemon_raises(beamd):
    import ray

    with pytest.raises(ValueError):
        ray.init(address="auto", num_gpus=2)
    assert not ray.is_initialized()


def test_init_known_kwargs_accepted(beamd):
    import ray

    ray.init(
        log_to_driver=True,
        namespace="ns",
        include_dashboard=False,
        logging_level="info",
        runtime_env={"env_vars": {"A": "1"}},
    )
    try:
        assert ray.get_runtime_context().namespace == "ns"
    finally:
        ray.shutdown()


def test_init_auto_connects_to_running_daemon(beamd):
    import ray

    ctx = ray.init("auto")
    try:
        assert ctx["node_id"] == beamd.status()["node_id"]
    finally:
        ray.shutdown()


# -- no daemon ---------------------------------------------------------------------


def test_init_auto_without_daemon_raises_connection_error(tmp_path, monkeypatch):
    import ray

    env = _no_daemon_env(tmp_path)
    monkeypatch.setenv("BEAM_SOCKET", env["BEAM_SOCKET"])
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConnectionError):
        ray.init("auto")
    with pytest.raises(ConnectionError):
        ray.init(address="auto")
    assert not ray.is_initialized()
    assert not os.path.exists(os.path.dirname(env["BEAM_SOCKET"]))


def test_ray_address_to_missing_daemon_raises_connection_error(tmp_path, monkeypatch):
    import ray

    monkeypatch.setenv("RAY_ADDRESS", str(tmp_path / "missing.sock"))
    monkeypatch.setenv("BEAM_SOCKET", str(tmp_path / "other.sock"))
    with pytest.raises(ConnectionError):
        ray.init()
    assert not ray.is_initialized()


PRIVATE_DRIVER = """
    import os, sys
    import ray
    ctx = ray.init(**@KWARGS@)
    print("SOCKET", ctx["address"])
    print("GPU", ray.cluster_resources().get("GPU", 0))

    @ray.remote(num_gpus=@GPUS@)
    class A:
        def info(self):
            return os.getpid(), ray.get_runtime_context().get_accelerator_ids()["GPU"]

    actors = [A.remote() for _ in range(@N@)]
    for pid, gpus in ray.get([a.info.remote() for a in actors]):
        print("WORKER", pid, ",".join(gpus))
    @ENDING@
"""


@pytest.mark.parametrize("ending", ["", "ray.shutdown()", "os._exit(0)", "os.kill(os.getpid(), 9)"])
def test_init_without_daemon_starts_private_one(tmp_path, ending):
    env = _no_daemon_env(tmp_path)
    code = (
        PRIVATE_DRIVER.replace("@KWARGS@", "{}").replace("@GPUS@", "0").replace("@N@", "2").replace("@ENDING@", ending)
    )
    out = run_driver(code, env, unset=("RAY_ADDRESS",))
    assert out.returncode == (-9 if "kill" in ending else 0), out.stderr
    sock = re.search(r"^SOCKET (.+)$", out.stdout, re.M).group(1)
    workers = [int(m) for m in re.findall(r"^WORKER (\d+)", out.stdout, re.M)]
    assert len(workers) == 2
    # the private daemon and its workers are gone with the driver
    assert wait_until(lambda: processes(sock, "cmdline") == [], 5)
    assert wait_until(lambda: beam_processes(sock) == [], 5)
    # (an exiting worker's environ reads empty before it is gone: wait for it)
    assert wait_until(lambda: not any(alive(p) for p in workers), 5)
    assert not os.path.exists(sock)


def test_init_num_gpus_sizes_private_daemon(tmp_path):
    env = _no_daemon_env(tmp_path)
    code = (
        PRIVATE_DRIVER.replace("@KWARGS@", "{'num_gpus': 2, 'num_cpus': 3}")
        .replace("@GPUS@", "1")
        .replace("@N@", "2")
        .replace("@ENDING@", "print('CPU', ray.cluster_resources()['CPU'])")
    )
    out = run_driver(code, env, unset=("RAY_ADDRESS",))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "GPU 2.0" in lines
    assert "CPU 3.0" in lines
    gpus = sorted(line.split()[2] for line in lines if line.startswith("WORKER"))
    assert gpus == ["0", "1"]
    sock = re.search(r"^SOCKET (.+)$", out.stdout, re.M).group(1)
    assert wait_until(lambda: processes(sock, "cmdline") == [], 5)


def test_init_local_always_starts_private_daemon(beamd):
    out = run_driver(
        textwrap.dedent("""
        import ray
        ctx = ray.init("local", num_gpus=1)
        print("NODE", ctx["node_id"])
        print("GPU", ray.cluster_resources()["GPU"])
        print("SOCKET", ctx["address"])
    """)
    )
    assert out.returncode == 0, out.stderr
    assert f"NODE {beamd.status()['node_id']}" not in out.stdout
    assert "GPU 1.0" in out.stdout.splitlines()
    sock = re.search(r"^SOCKET (.+)$", out.stdout, re.M).group(1)
    assert sock != beamd.socket
    assert wait_until(lambda: processes(sock, "cmdline") == [], 5)


# -- runtime context ------------------------------------------------------------------


def test_runtime_context_ids(ray_start, beamd):
    ray = ray_start
    ctx = ray.get_runtime_context()
    assert ctx.get_actor_id() is None
    node = ctx.get_node_id()
    assert re.fullmatch(r"[0-9a-f]{56}", node)
    assert node == beamd.status()["node_id"]
    assert re.fullmatch(r"[0-9a-f]{8}", ctx.get_job_id())
    assert ray.get_gpu_ids() == []
    with pytest.raises(RuntimeError):
        ctx.current_actor

    @ray.remote
    class Ctx:
        def ids(self):
            c = ray.get_runtime_context()
            return c.get_actor_id(), c.get_node_id(), c.get_job_id(), ray.is_initialized()

    a = Ctx.remote()
    actor_id, actor_node, job, inited = ray.get(a.ids.remote())
    assert re.fullmatch(r"[0-9a-f]{32}", actor_id)
    assert actor_id == a._actor_id.hex()
    assert actor_node == node
    assert job == ctx.get_job_id()
    assert inited is True


def test_nodes_and_resources(ray_start, beamd):
    ray = ray_start
    (node,) = ray.nodes()
    assert node["NodeID"] == ray.get_runtime_context().get_node_id()
    assert node["Alive"] is True
    assert node["NodeManagerAddress"] == "127.0.0.1"
    total = ray.cluster_resources()
    assert total["GPU"] == 4 and total["CPU"] == 8
    assert total["node:127.0.0.1"] == 1
    assert ray.available_resources()["GPU"] == 4

    @ray.remote(num_gpus=1, num_cpus=2)
    class Uses:
        def ok(self):
            return True

    u = Uses.remote()
    assert ray.get(u.ok.remote())
    avail = ray.available_resources()
    assert avail["GPU"] == 3 and avail["CPU"] == 6
    ray.kill(u)
    assert wait_until(lambda: ray.available_resources()["GPU"] == 4, 5)
    assert ray.available_resources()["CPU"] == 8


def _stale_socket(path):
    import socket

    os.makedirs(os.path.dirname(path), exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays, nobody listens


def test_stale_socket_file(tmp_path, monkeypatch):
    import subprocess

    import ray

    sock = str(tmp_path / "stale" / "beamd.sock")
    _stale_socket(sock)
    monkeypatch.setenv("BEAM_SOCKET", sock)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConnectionError):
        ray.init("auto")
    out = subprocess.run(
        [os.environ["BEAM_BEAMCTL"], "--socket", sock, "status"], capture_output=True, text=True, timeout=10
    )
    assert out.returncode != 0 and sock in out.stderr
    # a plain init starts its own daemon instead
    res = run_driver(
        """
        import ray
        ctx = ray.init()
        print("SOCKET", ctx["address"])
        print("GPU", ray.cluster_resources().get("GPU", 0) >= 0)
    """,
        {"BEAM_SOCKET": sock},
        unset=("RAY_ADDRESS",),
    )
    assert res.returncode == 0, res.stderr
    private = re.search(r"^SOCKET (.+)$", res.stdout, re.M).group(1)
    assert private != sock
    assert wait_until(lambda: processes(private, "cmdline") == [], 5)


def test_private_daemon_is_shared_with_child_processes(tmp_path):
    """A child of a driver that started a private beamd joins that daemon
    (vLLM's engine-core processes call ray.init() themselves), and the
    driver's environment is restored at shutdown."""
    code = textwrap.dedent("""
        import os, subprocess, sys
        import ray
        ray.init(num_gpus=1)
        child = subprocess.run([sys.executable, "-c",
            "import ray; ray.init(); print(ray.get_runtime_context().get_node_id()); ray.shutdown()"],
            capture_output=True, text=True, timeout=30)
        print("SAME", child.stdout.strip() == ray.get_runtime_context().get_node_id())
        ray.shutdown()
        print("AFTER", os.environ.get("BEAM_SOCKET"))
    """)
    out = run_driver(code, env={"BEAM_SOCKET": str(tmp_path / "nothing-here.sock")})
    assert out.returncode == 0, out.stderr
    assert "SAME True" in out.stdout
    assert f"AFTER {tmp_path / 'nothing-here.sock'}" in out.stdout
