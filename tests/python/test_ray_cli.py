# SPDX-License-Identifier: Apache-2.0
"""Ray's `ray` command on beam (ray.scripts.scripts), run from the build
tree against real daemons: start / stop / status / list nodes /
get-auth-token / --version, Ray's token conventions, and ray.init finding
the node `ray start` made. Each node gets its own HOME and Ray temp folder."""

import json
import os
import signal
import stat
import textwrap

import pytest

from beamkit.procs import alive, free_port, wait_until
from beamkit.venv import BuildNode as CliNode
from beamkit.venv import read_until
from ray.scripts.scripts import descendants

PYTHON = os.environ.get("BEAM_PYTHON", "/usr/bin/python3")


@pytest.fixture(autouse=True)
def _needs_build():
    if not os.environ.get("BEAM_BEAMD"):
        pytest.skip("BEAM_BEAMD is not set (run through scripts/test.sh)")


@pytest.fixture
def nodes():
    made = []

    def make(**env):
        n = CliNode(**env)
        made.append(n)
        return n

    yield make
    for n in made:
        n.ray("stop")
        for pid in n.started:
            assert not alive(pid)


def test_version_and_usage_errors(nodes):
    n = nodes()
    out = n.ray("--version")
    assert out.returncode == 0 and out.stdout == "ray, version 2.43.0\n"
    out = n.ray("frobnicate")
    assert out.returncode == 2 and "Error: No such command 'frobnicate'." in out.stderr
    out = n.ray("start", "--head", "--frobnicate")
    assert out.returncode == 2 and "Error: No such option '--frobnicate'." in out.stderr, out.stderr
    assert "Try 'ray start --help' for help." in out.stderr
    out = n.ray("start")
    assert out.returncode == 1 and "`--address` is a required flag unless starting a head node" in out.stderr
    out = n.ray("start", "--head", "--resources", '{"GPU": 2}')
    assert out.returncode == 1 and "--num-gpus" in out.stderr
    out = n.ray("start", "--head", "--dashboard-host")
    assert out.returncode == 2 and "Option '--dashboard-host' requires an argument." in out.stderr
    assert n.session() is None
    out = n.ray("status")
    assert out.returncode == 1 and "Could not find any running Ray instance" in out.stderr
    out = n.ray("stop")
    assert out.returncode == 0 and out.stdout == "Did not find any active Ray processes.\n"


def test_head_makes_token_ignores_ray_flags_and_stops(nodes):
    n = nodes()
    port = free_port()
    out = n.start(
        "--head",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=3",
        "--num-gpus",
        "2",
        "--resources",
        '{"accel": 2}',
        "--dashboard-host=0.0.0.0",
        "--include-dashboard",
        "false",
        "--disable-usage-stats",
        "--object-store-memory",
        "1000000",
        "-v",
    )
    assert out.returncode == 0, out.stderr
    for flag in ("--dashboard-host", "--include-dashboard", "--disable-usage-stats", "-v"):
        assert out.stderr.count(f"ignoring {flag} ") == 1, out.stderr
    assert "ignoring --object-store-memory" not in out.stderr  # beamd's shared-memory budget (shm.h)
    assert "Local node IP: 127.0.0.1" in out.stdout
    assert "Ray runtime started." in out.stdout
    assert f"    ray start --address='127.0.0.1:{port}'\n" in out.stdout
    path = os.path.join(n.home, ".ray", "auth_token")
    assert f"created the cluster token at {path} (mode 0600)" in out.stdout
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        token = f.read().strip()
    assert len(token) == 64
    got = n.ray("get-auth-token")
    assert got.returncode == 0 and got.stdout.strip() == token
    with open(os.path.join(n.tmp, "ray", "ray_current_cluster")) as f:
        assert f.read() == f"127.0.0.1:{port}"
    # one ray start per node
    again = n.ray("start", "--head", f"--port={free_port()}")
    assert again.returncode == 1 and "Ray is already running on this node" in again.stderr
    st = n.ray("status")
    assert st.returncode == 0, st.stderr
    lines = st.stdout.splitlines()
    assert lines[0].startswith("======== Autoscaler status: ")
    assert lines[1:4] == ["Node status", "-" * 63, "Active:"]
    assert lines[4].startswith(" 1 node_") and len(lines[4]) == len(" 1 node_") + 56
    usage = lines[lines.index("Usage:") + 1 : lines.index("Demands:") - 1]
    assert usage[:2] == [" 0.0/3.0 CPU", " 0.0/2.0 GPU"], usage
    assert " 0.0/2.0 accel" in usage
    assert any(u.endswith(" memory") and u.startswith(" 0B/") for u in usage)
    out = n.stop()
    assert out.stdout.endswith(", 0 worker process(es)\nStopped all 1 Ray processes.\n"), out
    assert out.stdout.startswith(f"beam: stopped beamd (pid {n.started[0]}) of the cluster at 127.0.0.1:{port}")
    # with nothing started, ray.init() starts a private daemon again
    got = n.python("import ray; print(ray.init()['address'])")
    assert got.returncode == 0 and f"/beam-{os.getuid()}/driver-" in got.stdout, got
    assert n.session() is None
    assert not os.path.exists(os.path.join(n.tmp, "ray", "ray_current_cluster"))


def test_auth_mode(nodes):
    n = nodes(RAY_AUTH_MODE="disabled")
    out = n.start("--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1")
    assert out.returncode == 1
    assert "RAY_AUTH_MODE=disabled is refused: beam never runs a cluster without authentication" in out.stderr
    assert n.session() is None and not os.path.exists(os.path.join(n.home, ".ray"))
    n = nodes(RAY_AUTH_TOKEN_PATH="/nonexistent/token")
    out = n.start("--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1")
    assert out.returncode == 1 and "cannot read the cluster token from /nonexistent/token" in out.stderr
    n = nodes(RAY_AUTH_MODE="token")
    out = n.start("--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1")
    assert out.returncode == 0, out.stderr
    n.stop()


def test_two_nodes_tokens_status_and_init(nodes):
    """A head whose token comes from RAY_AUTH_TOKEN (any text), a member
    that must hold the same; ray status / list nodes over both; ray.init in
    every form on the member reaches the member's daemon."""
    port = free_port()
    head = nodes(RAY_AUTH_TOKEN="correct horse battery staple")
    out = head.start("--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-gpus=2", "--num-cpus=2")
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(os.path.join(head.home, ".ray")), "a token from the environment is not written out"
    assert "with the same RAY_AUTH_TOKEN set there" in out.stdout

    member = nodes()
    out = member.start(f"--address=127.0.0.1:{port}", "--num-gpus=2", "--num-cpus=2")
    assert out.returncode == 1 and "no cluster token on this node" in out.stderr
    # the token by file, named by RAY_AUTH_TOKEN_PATH
    tok = os.path.join(member.home, "tok")
    with open(tok, "w") as f:
        f.write("correct horse battery staple\n")
    out = member.start(f"--address=127.0.0.1:{port}", "--num-gpus=2", "--num-cpus=2", env={"RAY_AUTH_TOKEN_PATH": tok})
    assert out.returncode == 0, out.stderr
    assert "Ray runtime started." in out.stdout and "To add another node" not in out.stdout

    st = head.ray("status")
    assert st.returncode == 0, st.stderr
    assert st.stdout.count("\n 1 node_") == 2, st.stdout
    assert " 0.0/4.0 GPU\n" in st.stdout and " 0.0/4.0 CPU\n" in st.stdout
    # scripts grep it
    assert [ln for ln in st.stdout.splitlines() if "GPU" in ln] == [" 0.0/4.0 GPU"]

    driver = member.popen(
        PYTHON,
        "-c",
        textwrap.dedent(
            """
        import json, ray, sys
        out = {}
        for addr in (None, "auto", "127.0.0.1:%d"):
            ray.init(address=addr)
            out[str(addr)] = ray.get_runtime_context().get_node_id()
            ray.shutdown()
        ray.init()
        @ray.remote(num_gpus=1)
        class A:
            def node(self): return ray.get_runtime_context().get_node_id()
        a = A.remote()
        out["actor"] = ray.get(a.node.remote())
        sys.stdout.write("IDS " + json.dumps(out) + "\\n")
        sys.stdout.flush()
        sys.stdin.readline()
    """
            % port
        ),
    )
    try:
        line = read_until(driver, "IDS ")
        got = json.loads(line.split("IDS ", 1)[1])
        listed = head.ray("list", "nodes", "--format=json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert len(rows) == 2 and all(r["state"] == "ALIVE" for r in rows)
        member_id = [r["node_id"] for r in rows if not r["is_head_node"]][0]
        assert got == {"None": member_id, "auto": member_id, f"127.0.0.1:{port}": member_id, "actor": got["actor"]}
        st = head.ray("status")
        assert " 1.0/4.0 GPU\n" in st.stdout, st.stdout
        table = member.ray("list", "nodes")
        assert table.returncode == 0 and "Total: 2" in table.stdout and table.stdout.count("ALIVE") == 2
    finally:
        driver.kill()
        driver.wait()

    # RAY_ADDRESS names the cluster too; another cluster's address is refused, naming both
    other = f"10.254.0.1:{port}"
    code = """
        import ray
        try:
            ray.init(address=%r)
        except ConnectionError as e:
            print("REFUSED", e)
        ray.init()
        print("NODE", ray.get_runtime_context().get_node_id())
    """
    out = member.python(code % other, env={"RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert out.returncode == 0, out.stderr
    assert f"REFUSED ray.init(address='{other}')" in out.stdout
    assert f"cluster at 127.0.0.1:{port}, not to {other}" in out.stdout
    assert f"NODE {member_id}" in out.stdout

    assert "\nStopped all 1 Ray processes." in member.stop().stdout
    assert "\nStopped all 1 Ray processes." in head.stop().stdout


def test_block_stop_takes_workers_and_blocker(nodes):
    n = nodes()
    port = free_port()
    blocker = n.ray_popen("start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-gpus=1", "--block")
    driver = None
    try:
        read_until(blocker, "This command will now block forever until terminated by a signal.")
        sess = n.session()
        assert sess["block_pid"] == blocker.pid
        driver = n.popen(
            PYTHON,
            "-c",
            textwrap.dedent("""
            import os, ray, sys
            ray.init()
            @ray.remote(num_gpus=1)
            class A:
                def pid(self): return os.getpid()
            a = A.remote()
            print("WORKER", ray.get(a.pid.remote()), flush=True)
            sys.stdin.readline()
        """),
        )
        worker = int(read_until(driver, "WORKER ").split()[-1])
        assert alive(worker)
        out = n.ray("stop")
        assert out.returncode == 0
        count = int(out.stdout.split("Stopped all ", 1)[1].split()[0])
        assert count >= 3, out.stdout  # beamd, the worker, the blocking ray start
        assert f"and the blocking `ray start` (pid {blocker.pid})" in out.stdout
        assert blocker.wait(20) == 0
        assert not alive(worker) and not alive(sess["pid"])
        assert n.session() is None
    finally:
        for p in (blocker, driver):
            if p and p.poll() is None:
                p.kill()
            if p:
                p.wait()


def test_block_ends_when_its_daemon_dies(nodes):
    n = nodes()
    blocker = n.ray_popen("start", "--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1", "--block")
    try:
        read_until(blocker, "This command will now block forever")
        os.kill(n.session()["pid"], signal.SIGKILL)
        assert blocker.wait(20) == 1
        assert "Some Ray subprocesses exited unexpectedly:" in read_until(blocker, "exit code=")
        assert n.session() is None
    finally:
        if blocker.poll() is None:
            blocker.kill()
        blocker.wait()


def test_listen_on_all_addresses_advertise_one(nodes):
    """--node-ip-address 0.0.0.0 (seen in users' scripts): the head listens
    on every address and advertises a routable one; ray.init finds it by
    either."""
    n = nodes()
    port = free_port()
    out = n.start("--head", f"--port={port}", "--node-ip-address", "0.0.0.0")
    assert out.returncode == 0, out.stderr
    ip = out.stdout.split("Local node IP: ", 1)[1].split()[0]
    assert ip != "0.0.0.0"
    assert f"ray start --address='{ip}:{port}'" in out.stdout
    with open("/proc/net/tcp") as f:
        rows = [r.split() for r in f.read().splitlines()[1:]]
    assert [r[1] for r in rows if r[3] == "0A" and r[1].endswith(f":{port:04X}")] == [f"00000000:{port:04X}"]
    out = n.python(
        """
        import ray
        for a in ("127.0.0.1:%d", "%s:%d"):
            ray.init(address=a)
            print("OK", ray.util.get_node_ip_address())
            ray.shutdown()
    """
        % (port, ip, port)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"OK {ip}\nOK {ip}\n"
    n.stop()


def test_interrupted_join_leaves_no_daemon(nodes):
    """A member that cannot join (the head refuses its token) keeps trying,
    as Ray's does; stopping `ray start` then leaves no beamd behind."""
    port = free_port()
    head = nodes()
    assert head.start("--head", f"--port={port}", "--node-ip-address=127.0.0.1").returncode == 0
    member = nodes(RAY_AUTH_TOKEN="not the head's token")
    p = member.ray_popen("start", f"--address=127.0.0.1:{port}")
    try:
        log = os.path.join(head.session()["session_dir"], "beamd.log")
        assert wait_until(lambda: "did not prove it holds the cluster token" in open(log).read(), 20)
        pids = descendants(p.pid)
        assert pids, "ray start runs beamd"
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 1
        assert "did not join the cluster at" in p.stdout.read()
        assert not any(alive(q) for q in pids)
        assert member.session() is None
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    head.stop()


def test_temp_dir(nodes, tmp_path):
    """--temp-dir holds the session's folder; ray.init and `ray stop` still
    find it through Ray's default temp folder."""
    n = nodes()
    port = free_port()
    custom = os.path.join(n.home, "rt")
    out = n.start("--head", f"--port={port}", "--node-ip-address=127.0.0.1", f"--temp-dir={custom}")
    assert out.returncode == 0, out.stderr
    assert n.session()["socket"].startswith(custom + "/session_")
    with open(os.path.join(custom, "ray_current_cluster")) as f:
        assert f.read() == f"127.0.0.1:{port}"
    got = n.python("import ray; ray.init(); print(ray.get_runtime_context().get_node_id())")
    assert got.returncode == 0, got.stderr
    assert n.stop().stdout.endswith("\nStopped all 1 Ray processes.\n")
    assert not os.path.exists(os.path.join(custom, "ray_current_cluster"))
