# SPDX-License-Identifier: Apache-2.0
"""Access control: who can reach beamd. Anyone who can talk to its socket
can run code as the daemon's user (pickles), so the socket is owner-only
(0600 in a 0700 folder beamd makes), every connection's peer uid is checked
(SO_PEERCRED) even where the file mode would let it in, beamd listens on no
network port, and a worker's hello must carry the token beamd gave that
worker. The tests run as root and play another user with setuid in a child
process (uid 65534, nobody)."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

from beamkit.client import Conn, expect_error
from beamkit.daemon import Beamd
from beamkit.procs import wait_until

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play another uid")

# Connects as whoever runs it and reports what happened, as one line:
# "refused <errno name>", "closed" (accepted, then closed with no reply) or
# "served <reply bytes>".
PROBE = textwrap.dedent("""
    import errno, socket, struct, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(sys.argv[1])
    except OSError as e:
        print("refused", errno.errorcode.get(e.errno, e.errno)); sys.exit(0)
    body = bytes([0x94, 0x00, 0x01, 0xa5]) + b"hello" + bytes([0x81, 0xa4]) + b"role" + bytes([0xa3]) + b"ctl"
    try:
        s.sendall(struct.pack(">I", len(body)) + body)
        data = s.recv(65536)
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    except socket.timeout:
        print("hung"); sys.exit(0)
    print("served", len(data) if data else 0) if data else print("closed")
""")


def probe(path, uid=NOBODY):
    """What a client of uid gets from the socket at path."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, path],
        capture_output=True,
        text=True,
        timeout=30,
        user=uid,
        group=uid,
        extra_groups=[],
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_socket_is_owner_only_in_a_folder_beamd_makes():
    d = Beamd()
    folder = os.path.join(d.dir, "made", "by-beamd")
    os.makedirs(os.path.dirname(folder))
    sock = os.path.join(folder, "beamd.sock")
    d2 = Beamd(extra=["--socket", sock])
    try:
        d2.socket = sock
        st = os.stat(sock)
        assert stat.S_ISSOCK(st.st_mode)
        assert _mode(sock) == 0o600 and st.st_uid == os.getuid()
        assert _mode(folder) == 0o700 and os.stat(folder).st_uid == os.getuid()
        assert d2.status()["socket"] == sock
        # another user cannot even reach it: the folder stops it before the socket
        assert probe(sock) == "refused EACCES"
        # the owner can
        with Conn(sock) as c:
            assert c.hello("ctl")["socket"] == sock
    finally:
        d2.close()
        d.close()


def test_a_folder_anyone_may_write_is_refused(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    exe = os.environ["BEAM_BEAMD"]
    out = subprocess.run(
        [exe, "--socket", str(folder / "beamd.sock"), "--num-cpus", "1"], capture_output=True, text=True, timeout=10
    )
    assert out.returncode != 0
    assert "writable by anyone" in out.stderr
    assert not (folder / "beamd.sock").exists()
    # a sticky world-writable folder (like /tmp) is fine: others cannot replace the socket
    os.chmod(folder, 0o1777)
    d = Beamd(extra=["--socket", str(folder / "beamd.sock")])
    try:
        d.socket = str(folder / "beamd.sock")
        assert _mode(d.socket) == 0o600
        assert probe(d.socket) == "refused EACCES"
    finally:
        d.close()


def test_another_uid_is_refused_by_peer_credentials_even_with_the_file_open(beamd):
    """chmod the socket 0666 and its folder 0755: the connect goes through,
    but beamd reads the peer's uid and closes the connection unanswered."""
    assert probe(beamd.socket) == "refused EACCES"
    os.chmod(beamd.dir, 0o755)
    os.chmod(beamd.socket, 0o666)
    for _ in range(3):
        assert probe(beamd.socket) == "closed"
    assert wait_until(lambda: f"refused a connection from uid {NOBODY}" in beamd.read_log(), 5)
    # the owner is served as before, and nothing of the refused clients is left
    st = beamd.status()
    assert st["clients"] == {"drivers": 0, "workers": 0, "ctl": 1}  # beamctl's own
    with Conn(beamd.socket) as c:
        c.hello("driver")
        assert c.call("status")["clients"]["drivers"] == 1


def test_root_may_reach_a_daemon_of_another_user():
    """beamd run as nobody: root is let in (the owner-or-root rule), another
    uid is not, by file mode or by peer check."""
    exe = os.environ["BEAM_BEAMD"]
    probe_dir = exe
    while probe_dir != "/":  # nobody must be able to run the build's beamd
        probe_dir = os.path.dirname(probe_dir)
        if not os.stat(probe_dir).st_mode & stat.S_IXOTH:
            pytest.skip(f"{probe_dir} is not searchable by other users")
    base = tempfile.mkdtemp(prefix="beamt-")
    os.chown(base, NOBODY, NOBODY)
    sock = os.path.join(base, "d", "beamd.sock")
    r, w = os.pipe()
    log = open(os.path.join(base, "beamd.log"), "wb")
    proc = subprocess.Popen(
        [exe, "--socket", sock, "--num-cpus", "1", "--num-gpus", "0", "--ready-fd", str(w)],
        pass_fds=(w,),
        stdout=log,
        stderr=log,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )
    os.close(w)
    try:
        with os.fdopen(r, "rb") as ready:
            assert ready.readline().startswith(b"ready")
        assert os.stat(sock).st_uid == NOBODY and _mode(sock) == 0o600
        assert probe(sock, uid=0).startswith("served")
        assert probe(sock, uid=NOBODY).startswith("served")
        assert probe(sock, uid=NOBODY - 1) == "refused EACCES"
        os.chmod(base, 0o755)
        os.chmod(os.path.dirname(sock), 0o755)
        os.chmod(sock, 0o666)
        assert probe(sock, uid=NOBODY - 1) == "closed"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 0


def _socket_inodes(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def _net_inodes(table):
    """Inodes of every socket in /proc/net/<table> (tcp, udp, ...)."""
    try:
        with open(f"/proc/net/{table}") as f:
            lines = f.readlines()[1:]
    except OSError:
        return set()
    return {int(line.split()[9]) for line in lines if len(line.split()) > 9}


def test_beamd_listens_on_no_network_port(ray_start, beamd):
    ray = ray_start

    @ray.remote
    class A:
        def ping(self):
            return 1

    a = A.remote()
    assert ray.get(a.ping.remote(), timeout=30) == 1
    mine = _socket_inodes(beamd.proc.pid)
    assert mine, "beamd has no sockets at all?"
    for table in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6", "udplite", "udplite6"):
        shared = mine & _net_inodes(table)
        assert not shared, f"beamd has {table} sockets: inodes {shared}"
    # all of them are unix sockets, one of them the listening one at its path
    with open("/proc/net/unix") as f:
        unix = {
            int(parts[6]): (parts[7] if len(parts) > 7 else "")
            for parts in (line.split() for line in f.readlines()[1:])
        }
    assert mine <= set(unix), mine - set(unix)
    assert beamd.socket in {unix[i] for i in mine}


def test_a_worker_hello_needs_its_token(ray_start, beamd):
    ray = ray_start

    @ray.remote
    class A:
        def pid(self):
            return os.getpid()

    a = A.remote()
    pid = ray.get(a.pid.remote(), timeout=30)
    actor_id = a._actor_id.binary()
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    token = env[b"BEAM_WORKER_TOKEN"].decode()
    assert len(token) >= 32
    # the token is in the worker's environment, which only its user can read
    st = os.stat(f"/proc/{pid}/environ")
    assert _mode(f"/proc/{pid}/environ") == 0o400 and st.st_uid == os.getuid()
    for bad in ("", "0" * len(token), token[:-1], token + "0", token.upper() if token != token.upper() else "x"):
        with Conn(beamd.socket) as c:
            expect_error(c.request("hello", {"role": "worker", "actor": actor_id, "token": bad}), "denied")
            assert c.drain_until_closed() == []
    # the right token, but the actor has its worker already
    with Conn(beamd.socket) as c:
        expect_error(c.request("hello", {"role": "worker", "actor": actor_id, "token": token}), "denied")
        assert c.drain_until_closed() == []
    # none of that disturbed the actor
    assert ray.get(a.pid.remote(), timeout=10) == pid
    assert beamd.status()["clients"]["workers"] == 1
