# SPDX-License-Identifier: Apache-2.0
"""Whom a driver and the `ray` command trust on a machine shared by several
users (docs/RELIABILITY.md, "Trust model"): a session file, its folder and
the socket it names are followed only when they are the caller's (or
root's), `_beam` and beamctl talk only to a daemon whose peer uid is the
caller's or root's, `ray start` makes its temp folder 0700 and refuses
another user's, and `ray stop` acts on the caller's own processes only.

The other user is a throwaway uid with no passwd entry, played with
`setpriv`; the tests run as root (skipped otherwise). Every test gets a Ray
temp folder of its own (RAY_TMPDIR, never /tmp/ray); the shared one is mode
1777 as /tmp is. What the other user starts is killed and its files go with
the test."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

from beamkit.procs import alive, free_port, kill_all, processes, wait_gone
from beamkit.venv import BuildNode, read_until

OTHER = 64123  # a uid nobody has

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play another uid")


@pytest.fixture(autouse=True)
def _needs_build():
    if not os.environ.get("BEAM_BEAMD"):
        pytest.skip("BEAM_BEAMD is not set (run through scripts/test.sh)")


@pytest.fixture
def shared():
    """A folder both users may write, sticky as /tmp: RAY_TMPDIR for both.
    Anything left running with it in its environment is killed after."""
    base = tempfile.mkdtemp(prefix="beam-trust-", dir="/tmp")
    os.chmod(base, 0o1777)
    yield base
    left = processes(f"RAY_TMPDIR={base}")
    kill_all(left)
    assert wait_gone(left, 10)
    shutil.rmtree(base, ignore_errors=True)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# A daemon that is not beamd, run by the other user: it binds the socket,
# says "ready", and logs one line per connection it accepts.
FAKE_DAEMON = textwrap.dedent("""
    import os, socket, sys
    path, log = sys.argv[1], sys.argv[2]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o777)
    s.listen(16)
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        with open(log, "a") as f:
            f.write("connected\\n")
        c.close()
""")


def start_fake_daemon(path, uid):
    """The fake daemon at path as uid: (its Popen, the log of its accepts)."""
    log = path + ".log"
    open(log, "w").close()
    os.chmod(log, 0o666)
    proc = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", FAKE_DAEMON, path, log],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd="/",
    )
    read_until(proc, "ready", timeout=30)
    return proc, log


def stop(proc):
    proc.kill()
    proc.wait()
    proc.stdout.close()


def accepts(log):
    with open(log) as f:
        return f.read().count("connected")


def as_other(*args):
    return ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", *args]


def clean_driver(node, code):
    """code run by python as node's user, with no BEAM_SOCKET or RAY_ADDRESS."""
    return node.python(code, env={"BEAM_SOCKET": "", "RAY_ADDRESS": ""})


@needs_root
def test_another_users_session_file_is_refused(shared):
    """The other user plants Ray's temp folder, a session file and a fake
    daemon; root's ray.init() and address="auto" refuse the file, naming it,
    and never connect to that daemon."""
    planted = os.path.join(shared, "ray")
    subprocess.run(as_other("mkdir", "-m", "0755", planted), check=True)
    sock = os.path.join(planted, "evil.sock")
    fake, log = start_fake_daemon(sock, OTHER)
    try:
        info = os.path.join(planted, "beam_node.json")
        body = {"pid": fake.pid, "socket": sock, "cluster": "127.0.0.1:6379", "head": True}
        subprocess.run(
            as_other(sys.executable, "-c", f"import json; json.dump({body!r}, open({info!r}, 'w'))"), check=True
        )
        assert os.stat(info).st_uid == OTHER
        victim = BuildNode(tmp=shared)
        for how in ("ray.init()", "ray.init(address='auto')"):
            got = clean_driver(
                victim,
                f"""
                import ray
                try:
                    {how}
                except ConnectionError as e:
                    print("refused:", e)
                else:
                    print("connected")
            """,
            )
            assert got.returncode == 0, got.stderr
            assert got.stdout.startswith("refused:"), got.stdout
            assert f"refusing the session file {info}" in got.stdout
            assert f"owner uid {OTHER}" in got.stdout and "RAY_TMPDIR" in got.stdout
        assert accepts(log) == 0
        # `ray status` finds the node as ray.init does, so it refuses it too
        out = victim.ray("status")
        assert out.returncode == 1 and "refusing the session file" in out.stderr
        assert "Traceback" not in out.stderr
        assert accepts(log) == 0
    finally:
        stop(fake)


@needs_root
def test_client_checks_the_peer_uid_of_the_socket(shared):
    """A socket another user serves, reached by path (BEAM_SOCKET, or a
    folder the check above cannot see): _beam and beamctl read SO_PEERCRED
    and refuse it. A daemon of the caller's own uid, or root's, is served."""
    import _beam

    sock = os.path.join(shared, "d.sock")
    fake, log = start_fake_daemon(sock, OTHER)
    try:
        with pytest.raises(PermissionError, match=f"runs as uid {OTHER}, not as you"):
            _beam.Client(sock)
        out = subprocess.run(
            [os.environ["BEAM_BEAMCTL"], "--socket", sock, "status"], capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 1 and f"runs as uid {OTHER}" in out.stderr, out.stderr
        node = BuildNode(tmp=shared)
        got = node.python(f"""
            import ray
            try:
                ray.init(address={"unix:" + sock!r})
            except ConnectionError as e:
                print("refused:", e)
        """)
        assert (
            f"refused: beam: could not connect to beamd at {sock}: the process serving {sock} runs as "
            f"uid {OTHER}" in got.stdout
        ), got.stdout + got.stderr
    finally:
        stop(fake)
    # root's daemon is trusted by another user's client (root can read any
    # process anyway); the fake one is only accepted, not answered
    rsock = os.path.join(shared, "root.sock")
    fake, log = start_fake_daemon(rsock, 0)
    try:
        got = subprocess.run(
            as_other(sys.executable, "-c", f"import _beam; _beam.Client({rsock!r}); print('ok')"),
            capture_output=True,
            text=True,
            timeout=30,
            env=dict(os.environ),
            cwd="/",
        )
        assert got.stdout == "ok\n", got.stderr
    finally:
        stop(fake)


@needs_root
def test_ray_start_makes_its_folder_private_and_refuses_another_users(shared):
    root = BuildNode(tmp=shared)
    port = free_port()
    out = root.start("--head", f"--port={port}", "--node-ip-address=127.0.0.1")
    assert out.returncode == 0, out.stderr
    try:
        assert _mode(os.path.join(shared, "ray")) == 0o700
    finally:
        assert root.stop().returncode == 0
    shutil.rmtree(os.path.join(shared, "ray"))
    # the other user made Ray's temp folder first: root's `ray start` will not use it
    subprocess.run(as_other("mkdir", "-m", "0755", os.path.join(shared, "ray")), check=True)
    out = root.ray("start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"refusing Ray's temp folder {shared}/ray: it belongs to another user (owner uid {OTHER}" in out.stderr
    assert "Traceback" not in out.stderr
    assert os.listdir(os.path.join(shared, "ray")) == []
    # a folder of root's that others may write (no sticky bit) is refused too
    mine = os.path.join(root.home, "open")
    os.makedirs(os.path.join(mine, "ray"))
    os.chmod(mine, 0o777)
    out = root.ray("start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", env={"RAY_TMPDIR": mine})
    if out.returncode == 0:
        root.ray("stop", env={"RAY_TMPDIR": mine})
    assert out.returncode == 1 and "others may write it and it has no sticky bit" in out.stderr, out.stderr


@needs_root
def test_ray_commands_act_on_their_users_clusters_only(shared):
    """Root runs `ray start --head`; the other user, with the same Ray temp
    folder, gets clear answers from `ray stop` and `ray start --head`, and
    root's beamd keeps running. Then the other way round: root's `ray stop`
    leaves the other user's beamd alone."""
    root = BuildNode(tmp=shared)
    other = BuildNode(uid=OTHER, tmp=shared)
    out = root.start("--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1")
    assert out.returncode == 0, out.stderr
    beamd = root.started[0]
    try:
        out = other.ray("stop")
        assert out.returncode == 0 and out.stdout == "Did not find any active Ray processes.\n", out
        assert "Traceback" not in out.stderr
        assert alive(beamd)
        out = other.ray("start", "--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1")
        assert out.returncode == 1, out.stdout + out.stderr
        assert (
            f"cannot use {shared}/ray as Ray's temp folder: it belongs to uid 0 and you (uid {OTHER}) may "
            "not write it"
            in out.stderr
            and "RAY_TMPDIR" in out.stderr
        )
        assert "Traceback" not in out.stderr
        # a folder others may read (as an older `ray start` made it): the file is seen, and refused
        os.chmod(os.path.join(shared, "ray"), 0o755)
        out = other.ray("stop")
        assert out.returncode == 0 and out.stdout == "Did not find any active Ray processes.\n", out
        assert "refusing the session file" not in out.stderr  # root's file: trusted, but not the caller's beamd
        assert "Traceback" not in out.stderr
        assert alive(beamd)
    finally:
        assert root.stop().returncode == 0
    assert wait_gone(beamd)

    # the other user's cluster, and root's `ray stop`
    own = tempfile.mkdtemp(prefix="beam-trust-o-", dir=shared)
    os.chown(own, OTHER, OTHER)
    other = BuildNode(uid=OTHER, tmp=own)
    out = other.start("--head", f"--port={free_port()}", "--node-ip-address=127.0.0.1")
    assert out.returncode == 0, out.stderr
    theirs = other.started[0]
    try:
        root = BuildNode(tmp=own)
        out = root.ray("stop")
        assert out.returncode == 0 and out.stdout == "Did not find any active Ray processes.\n", out
        assert "refusing the session file" in out.stderr and "only your own processes" in out.stderr
        assert "Traceback" not in out.stderr
        assert alive(theirs)
    finally:
        assert other.stop().returncode == 0
    assert wait_gone(theirs)


@needs_root
def test_a_folder_another_user_made_first_is_refused(shared):
    """The other user made the folder first: root's beamd will not bind its
    socket there, and a driver with no cluster will not start its private
    daemon in the other user's $TMPDIR/beam-UID."""
    theirs = os.path.join(shared, "theirs")
    subprocess.run(as_other("mkdir", "-m", "0755", theirs), check=True)
    out = subprocess.run(
        [os.environ["BEAM_BEAMD"], "--socket", os.path.join(theirs, "beamd.sock"), "--num-cpus", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode != 0
    assert f"{theirs} belongs to uid {OTHER}, not to this daemon's user or root" in out.stderr, out.stderr
    assert os.listdir(theirs) == []

    private = os.path.join(shared, f"beam-{os.getuid()}")
    subprocess.run(as_other("mkdir", "-m", "0755", private), check=True)
    n = BuildNode(TMPDIR=shared)
    got = clean_driver(
        n,
        """
        import ray
        try:
            ray.init(num_cpus=1)
        except ConnectionError as e:
            print("refused:", e)
    """,
    )
    assert f"refused: beam: refusing the private daemons' folder {private}: it belongs to another user" in got.stdout, (
        got.stdout + got.stderr
    )
    assert os.listdir(private) == []


def test_ray_stop_reads_session_files_as_ray_init_does(tmp_path):
    """A session file that is JSON but not a session (an array, a pid that
    is not a number): `ray stop` says there is nothing to stop, as ray.init
    finds nothing to connect to, instead of a traceback."""
    n = BuildNode()
    os.makedirs(os.path.join(n.tmp, "ray"), mode=0o700)
    info = os.path.join(n.tmp, "ray", "beam_node.json")
    for body in ("[1, 2]", '{"pid": "12", "socket": "/x"}', '{"pid": 1, "socket": 5, "cluster": "x:1"}', "3"):
        with open(info, "w") as f:
            f.write(body)
        out = n.ray("stop")
        assert out.returncode == 0 and out.stdout == "Did not find any active Ray processes.\n", (body, out)
        assert "Traceback" not in out.stderr, (body, out.stderr)
        got = clean_driver(n, "import ray; ray.init(address='auto')")
        assert got.returncode == 1 and "Could not find any running Ray instance" in got.stderr, (body, got.stderr)
