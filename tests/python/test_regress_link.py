# SPDX-License-Identifier: Apache-2.0
"""Regression tests for the link and the socket (issue 10, bugs 2, 7, 8),
each against real daemons:

- a token holder's malformed link messages (a `join` without a node id, of
  the wrong length or type, bad resources; bad fields in every message after
  it) are refused with the link closed, and the head goes on serving; a
  member refuses a head's malformed messages the same way;
- two beamd started at once on one --socket: exactly one keeps running;
- idle unauthenticated TCP connections are capped (in all and per peer
  address) and stop short of an fd reserve: local drivers still connect and
  actors still start;
- issue 14: the link's write queue has the unix socket's cap (--max-outq): a
  member that stops reading is dropped, and the head does not grow.
"""

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile

from beamkit.client import Conn, Ids
from beamkit.daemon import beamd_args, driver_env, run_driver
from beamkit.link import (
    H2M,
    M2H,
    RawPeer,
    SealedPeer,
    SealedStream,
    challenge,
    head_mac,
    node_mac,
    read_token,
    stream_key,
)
from beamkit.procs import hwm_kib, reset_hwm, rss_kib, sanitized, wait_until
from beamkit.wire import MSG_PUSH, FrameSocket, push
from beamkit.wire import pack as mp_pack
from beamkit.wire import unpack as mp_unpack

HEAD_IP = "127.0.0.1"


def _join(node_ip, over=None):
    """A well-formed join's params (no resources: nothing is placed on it)."""
    p = {
        "max_frame": 1 << 20,
        "node_id": os.urandom(28),
        "node_ip": node_ip,
        "hostname": "fake",
        "socket": "/nonexistent/beamd.sock",
        "resources": [],
        "gpus": [],
    }
    for k, v in (over or {}).items():
        if v is _DROP:
            p.pop(k, None)
        else:
            p[k] = v
    return p


_DROP = object()

# (what, join params over a good join): each must be refused
BAD_JOINS = [
    ("no node_id", {"node_id": _DROP}),
    ("short node_id", {"node_id": os.urandom(27)}),
    ("long node_id", {"node_id": os.urandom(29)}),
    ("str node_id", {"node_id": "x" * 28}),
    ("int node_id", {"node_id": 7}),
    ("nil node_id", {"node_id": None}),
    ("no resources", {"resources": _DROP}),
    ("resources not an array", {"resources": {"CPU": 10000}}),
    ("resource not a pair", {"resources": [["CPU"]]}),
    ("resource amount a str", {"resources": [["CPU", "10000"]]}),
    ("resource amount negative", {"resources": [["CPU", -5]]}),
    ("resource name an int", {"resources": [[1, 10000]]}),
    ("resource name too long", {"resources": [["R" * 300, 10000]]}),
    ("gpus not an array", {"gpus": "0"}),
    ("gpu id an int", {"gpus": [0]}),
    ("gpu id too long", {"gpus": ["g" * 300]}),
    ("too many gpus", {"gpus": [str(i) for i in range(300)]}),
    ("node_ip an int", {"node_ip": 12}),
    ("node_ip too long", {"node_ip": "1" * 200}),
    ("hostname a bin", {"hostname": b"host"}),
    ("socket an array", {"socket": ["/x"]}),
    ("max_frame a str", {"max_frame": "big"}),
    ("max_frame negative", {"max_frame": -1}),
]


def _driver_works(c):
    """A fresh driver on the head still runs an actor to the end."""
    code = (
        "import ray\nray.init()\n"
        "@ray.remote(num_cpus=1)\nclass A:\n    def f(self, x):\n        return x + 1\n"
        "a = A.remote()\nassert ray.get(a.f.remote(41), timeout=30) == 42\nprint('ok')\n"
    )
    out = run_driver(code, env=driver_env(c.head), timeout=60)
    return out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_malformed_joins_are_refused_and_the_head_goes_on(make_cluster):
    """Bug 2: a join without a node id, of the wrong length or type (or with
    any other field malformed) closed nothing cleanly: the head freed an
    uninitialised pool and died. Each is now refused with the link closed."""
    c = make_cluster(members=0, node_timeout=60)
    before = len(c.node_table())
    for what, over in BAD_JOINS:
        p = SealedPeer(c)
        p.push("join", _join("127.0.1.9", over))
        assert p.closed_by_peer(5), f"{what}: the head kept the link"
        p.close()
        assert c.head.alive(), f"{what}: the head died\n{c.head.read_log()[-3000:]}"
    assert len(c.node_table()) == before, c.node_table()
    ok, out = _driver_works(c)
    assert ok, out
    # a good join still gets in after all that
    p = SealedPeer(c)
    p.push("join", _join("127.0.1.10"))
    assert wait_until(lambda: "127.0.1.10" in c.alive_nodes(), 5, 0.05), c.head.read_log()[-2000:]
    p.close()


# (op, params) sent by a member that joined: each is malformed, and must end
# the link (the member is then lost) while the head goes on
BAD_MESSAGES = [
    ("client_open", {"vconn": "1", "pid": 1, "uid": 0}),
    ("client_open", {"vconn": 0, "pid": 1, "uid": 0}),
    ("client_open", {"vconn": 1, "pid": "1", "uid": 0}),
    ("client_open", {"vconn": 1, "pid": 1, "uid": -3}),
    ("client_frame", {"vconn": 1}),
    ("client_frame", {"vconn": 1, "frame": "not a bin"}),
    ("client_frame", {"vconn": 1 << 40, "frame": b""}),
    ("client_closed", {"vconn": b"\x01"}),
    ("worker_started", {"actor": b"a" * 15, "pid": 1}),
    ("worker_started", {"actor": b"a" * 16, "pid": "1"}),
    ("worker_log", {"actor": b"a" * 16, "stream": 1, "text": 5}),
    ("worker_log", {"actor": b"a" * 16, "stream": "out", "text": "x"}),
    ("worker_exit", {"actor": b"a" * 16, "pid": 1, "status": "0", "signal": 0}),
    ("worker_exit", {"actor": "a" * 16, "pid": 1, "status": 0, "signal": 0}),
    ("worker_exit", {"actor": b"a" * 16, "pid": 1, "status": 0, "signal": 1 << 40}),
    ("heartbeat", []),
    ("join", _join("127.0.1.12")),
    ("no_such_op", {}),
]


def test_malformed_messages_after_the_join_end_the_link(make_cluster):
    """Every field of every message a member sends is checked: a wrong one
    ends that member's link (the head loses the node, as any lost node);
    the head and its other clients go on."""
    c = make_cluster(members=0, node_timeout=60)  # a silent fake member is not lost meanwhile
    for i, (op, params) in enumerate(BAD_MESSAGES):
        ip = f"127.0.2.{i + 1}"
        p = SealedPeer(c)
        p.push("join", _join(ip))
        assert wait_until(lambda: ip in c.alive_nodes(), 5, 0.02), (op, c.head.read_log()[-2000:])
        p.push(op, params)
        assert p.closed_by_peer(5), f"{op} {params!r}: the head kept the link"
        p.close()
        assert c.head.alive(), f"{op}: the head died\n{c.head.read_log()[-3000:]}"
        assert ip not in c.alive_nodes()
    ok, out = _driver_works(c)
    assert ok, out


def _start_pair(sock):
    """Two beamd on one socket, started together; [(proc, ready read end)]."""
    out = []
    for _ in range(2):
        r, w = os.pipe()
        p = subprocess.Popen(
            beamd_args(sock, cpus=1, gpus=0, log_level="warn", extra=("--ready-fd", str(w))),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(w,),
        )
        os.close(w)
        out.append((p, r))
    return out


def test_two_daemons_started_at_once_on_one_socket_one_survives():
    """Bug 7: check, unlink and bind without a lock let two daemons started
    together both run (about 7% of the time), one of them unreachable. Now
    the first to lock the socket's lock file runs; the other exits 1 with a
    clear error. 72 pairs, 6 at a time, each in a folder that does not exist
    yet (both daemons make it)."""
    root = tempfile.mkdtemp(prefix="beamlock-")
    procs = []
    try:
        for rnd in range(12):
            pairs = [_start_pair(os.path.join(root, f"r{rnd}p{i}", "beamd.sock")) for i in range(6)]
            procs += [p for pair in pairs for p, _ in pair]
            for i, pair in enumerate(pairs):
                ready = []
                for p, r in pair:
                    with os.fdopen(r, "rb") as f:
                        ready.append(f.readline().startswith(b"ready"))  # EOF: it exited first
                # the loser closes its ready fd as it exits: let it finish
                wait_until(lambda: sum(p.poll() is None for p, _ in pair) < 2, 2, 0.01)
                running = [p for p, _ in pair if p.poll() is None]
                errs = [p.stderr.read().decode(errors="replace") for p, _ in pair if p not in running]
                where = f"round {rnd} pair {i}"
                assert len(running) == 1, f"{where}: {len(running)} daemons run on one socket {errs}"
                assert sum(ready) == 1, (where, ready, errs)
                assert [p.returncode for p, _ in pair if p not in running] == [1], (where, errs)
                assert "already" in errs[0], (where, errs)
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                assert p.wait(timeout=10) in (0, 1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()
        shutil.rmtree(root, ignore_errors=True)


def _flood(port, sources, per_source):
    """per_source idle TCP connections to the head from each source address
    (127.0.0.x), none of which ever answers the challenge."""
    socks = []
    for ip in sources:
        for _ in range(per_source):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST: no TIME_WAIT
            s.settimeout(2)
            try:
                s.bind((ip, 0))
                s.connect((HEAD_IP, port))
            except OSError:
                s.close()
                continue
            s.setblocking(False)
            socks.append(s)
    return socks


def _held(socks):
    """How many of socks the head still holds (a refused one reads EOF or a reset)."""
    n = 0
    for s in socks:
        try:
            while True:
                if not s.recv(65536):
                    break  # EOF
        except BlockingIOError:
            n += 1  # open, nothing more to read
        except OSError:
            pass  # reset
    return n


def test_idle_unauthenticated_connections_are_capped(make_cluster):
    """Bug 8: idle connections that never answer the challenge were not
    capped: enough of them took every fd of the head, and local drivers
    were then refused and workers could not start. Now at most
    --max-handshakes-per-ip (8) from one address and --max-handshakes (64)
    in all are held, fds are kept in reserve, and the handshake still times
    out. The head runs with 256 fds."""
    c = make_cluster(members=0, node_timeout=60, wrap_head=["prlimit", "--nofile=256"])
    socks = []
    try:
        socks += _flood(c.port, ["127.0.0.50"], 400)
        ok, out = _driver_works(c)
        assert ok, "a local driver failed while idle node connections were held:\n" + out
        assert wait_until(lambda: _held(socks) <= 8, 3, 0.05), _held(socks)
        # the cap is per address: a real member (its link comes from
        # 127.0.0.1) still joins
        c.add_member()
        # and in all: from 20 more addresses, 8 each
        socks += _flood(c.port, [f"127.0.0.{i}" for i in range(60, 80)], 8)
        assert wait_until(lambda: _held(socks) <= 64, 3, 0.05), _held(socks)
        ok, out = _driver_works(c)
        assert ok, out
        # the handshake still times out (5 s): the ones held are let go
        assert wait_until(lambda: _held(socks) == 0, 15, 0.1), _held(socks)
        assert "the handshake took too long" in c.head.read_log()
        assert c.head.alive()
    finally:
        for s in socks:
            s.close()


def test_node_connections_leave_fds_for_local_clients(make_cluster):
    """Bug 8, the reserve: with the caps raised past the fd limit (256),
    node connections stop at a quarter of the fds short of it; the rest
    stay for local drivers and workers."""
    c = make_cluster(members=0, node_timeout=60, wrap_head=["prlimit", "--nofile=256"], start=False)
    c.head.args += ["--max-handshakes", "1000", "--max-handshakes-per-ip", "1000"]
    c.start()
    socks = []
    try:
        socks += _flood(c.port, ["127.0.0.50"], 400)
        ok, out = _driver_works(c)
        assert ok, "a local driver failed while node connections took the fds:\n" + out
        held = _held(socks)
        assert 100 < held < 256 - 64 + 1, held  # many held (no cap), none past the reserve
        assert "too few file descriptors left" in c.head.read_log()
    finally:
        for s in socks:
            s.close()


# (op, params) a head never sends so: each must end the member's link (the
# member then joins again) and leave the member running
BAD_FROM_HEAD = [
    ("welcome", {"node_index": 0, "max_frame": 1 << 20}),
    (
        "spawn",
        {
            "actor": b"a" * 15,
            "class_name": "A",
            "python": "/bin/false",
            "cwd": "",
            "env": [],
            "sys_path": [],
            "gpus": "",
            "token": "t",
            "noset_cuda": 0,
            "owner_pid": 1,
        },
    ),
    (
        "spawn",
        {
            "actor": b"a" * 16,
            "class_name": "A",
            "python": "/bin/false",
            "cwd": "",
            "env": [1],
            "sys_path": [],
            "gpus": "",
            "token": "t",
            "noset_cuda": 0,
            "owner_pid": 1,
        },
    ),
    ("client_frame", {"vconn": "1", "frame": b""}),
    ("close_client", {}),
    ("kill_worker", {"actor": 5}),
    ("join", {}),
]


def test_a_member_refuses_malformed_messages_from_its_head(make_cluster):
    """The member's side is checked the same way: a fake head with the token
    does the real handshake, welcomes the member, then sends one malformed
    message; the member closes that link, says why, and joins again."""
    c = make_cluster(members=0, node_timeout=60)  # no heartbeat timeout meanwhile
    token = read_token(c.token_file)
    srv = socket.socket()
    srv.bind((HEAD_IP, 0))
    srv.listen(8)
    srv.settimeout(10)
    node = c.member_node(ip="127.0.0.2")
    c.redirect(node, f"{HEAD_IP}:{srv.getsockname()[1]}")
    node.start(wait_ready=False)
    c.members.append(node)
    try:
        for op, params in BAD_FROM_HEAD:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(5)
                p = FrameSocket(conn)  # frames, on the head's end
                head_nonce, auth = challenge(p)
                member_nonce = auth[auth.index(b"nonce") + 7 :][:32]
                tx = SealedStream(stream_key(token, H2M, head_nonce, member_nonce))
                conn.sendall(
                    push(
                        "auth_ok",
                        {"nonce": head_nonce, "mac": head_mac(token, member_nonce, head_nonce), "stream": tx.header},
                    )
                )
                assert p.read_body() is not None  # the join (sealed)
                if op != "welcome":
                    conn.sendall(
                        tx.seal_frame(
                            [2, "welcome", {"node_index": 2, "max_frame": 1 << 20, "head_id": os.urandom(28)}]
                        )
                    )
                conn.sendall(tx.seal_frame([2, op, params]))
                assert p.closed_by_peer(5), f"{op} {params!r}: the member kept the link"
            assert node.alive(), node.read_log()[-2000:]
        log = node.read_log()
        for what in (
            "a welcome with a bad 'node_index'",
            "a spawn with a bad 'actor'",
            "a spawn with a bad 'env'",
            "a client_frame with a bad 'vconn'",
            "a close_client without 'vconn'",
            "a kill_worker with a bad 'actor'",
            "a 'join', which the head does not send",
        ):
            assert what in log, (what, log[-3000:])
    finally:
        srv.close()


# --- issue 14: the link's output cap ------------------------------------------


class _Opener:
    """The receiving half of the head's secretstream, through ctypes."""

    def __init__(self, key, header):
        import ctypes
        import ctypes.util

        self._c = ctypes
        self._na = ctypes.CDLL(ctypes.util.find_library("sodium") or "libsodium.so.23")
        assert self._na.sodium_init() >= 0
        self._state = ctypes.create_string_buffer(self._na.crypto_secretstream_xchacha20poly1305_statebytes())
        assert self._na.crypto_secretstream_xchacha20poly1305_init_pull(self._state, header, key) == 0

    def open(self, sealed):
        c = self._c
        out = c.create_string_buffer(max(1, len(sealed) - 17))
        n, tag = c.c_ulonglong(), c.c_ubyte()
        assert (
            self._na.crypto_secretstream_xchacha20poly1305_pull(
                self._state, out, c.byref(n), c.byref(tag), sealed, c.c_ulonglong(len(sealed)), None, c.c_ulonglong(0)
            )
            == 0
        ), "a frame from the head did not open"
        return mp_unpack(out.raw[: n.value])[0]


class _ReadingPeer(RawPeer):
    """A member spoken by hand that also opens what the head sends it."""

    def __init__(self, c, timeout=5.0):
        super().__init__(c.head_ip, c.port, timeout)
        token = read_token(c.token_file)
        head_nonce = self.read_frame()[2]["nonce"]
        mine = os.urandom(32)
        self.tx = SealedStream(stream_key(token, M2H, head_nonce, mine))
        self.send(push("auth", {"nonce": mine, "mac": node_mac(token, head_nonce, mine), "stream": self.tx.header}))
        ok = self.read_frame()
        assert ok[1] == "auth_ok", ok
        self.rx = _Opener(stream_key(token, H2M, head_nonce, mine), ok[2]["stream"])

    def push(self, op, params):
        self.send(self.tx.seal_frame([MSG_PUSH, op, params]))

    def message(self, timeout=10.0):
        body = self.read_body(timeout)
        return None if body is None else self.rx.open(body)

    def client_reply(self, vconn, msgid):
        """The head's reply to client vconn's request msgid (the rest skipped)."""
        while True:
            m = self.message()
            assert m is not None, "the head closed the link"
            if m[1] == "client_frame" and m[2]["vconn"] == vconn:
                reply = mp_unpack(m[2]["frame"])[0]
                if reply[0] == 1 and reply[1] == msgid:
                    return reply

    def request(self, vconn, msgid, op, params):
        self.push("client_frame", {"vconn": vconn, "frame": mp_pack([0, msgid, op, params])})


LINK_MAX_OUTQ = 16 << 20


def test_a_member_that_stops_reading_is_dropped_and_the_head_does_not_grow(make_cluster):
    """Issue 14: the link's write queue had no cap, so a remote driver whose
    node stopped reading grew the head without bound (until the node
    timeout). A member's driver here asks for an 8 MiB object 64 times and
    its node never reads the replies (512 MiB): the head queues at most
    about --max-outq for it, then drops the link (the member is lost, as
    any lost node), stays within a bound derived from the cap, and goes on
    serving its own drivers."""
    c = make_cluster(members=0, node_timeout=60, start=False)  # the timeout is not what drops it
    c.head.args += ["--max-outq", str(LINK_MAX_OUTQ)]
    c.start()
    ip = "127.0.3.1"
    pid = c.head.pid
    p = _ReadingPeer(c)
    try:
        p.push("join", _join(ip))
        assert p.message()[1] == "welcome"
        assert wait_until(lambda: ip in c.alive_nodes(), 5, 0.02), c.head.read_log()[-2000:]
        p.push("client_open", {"vconn": 1, "pid": os.getpid(), "uid": os.getuid()})
        p.request(1, 1, "hello", {"role": "driver", "pid": os.getpid()})
        hello = p.client_reply(1, 1)
        assert hello[2] is None, hello
        obj = Ids(hello[3]).obj()
        p.request(1, 2, "put", {"obj": obj, "data": b"v" * (8 << 20)})
        put = p.client_reply(1, 2)
        assert put[2] is None, put
        rss0 = rss_kib(pid)
        reset_hwm(pid)
        for i in range(64):
            p.request(1, 10 + i, "get", {"objs": [obj], "timeout_ms": 0})
        assert wait_until(lambda: ip not in c.alive_nodes(), 30, 0.05), c.head.read_log()[-3000:]
        grown = hwm_kib(pid) - rss0
        log = c.head.read_log()
        assert "is not reading" in log and "too many unread bytes queued" in log, log[-3000:]
        print(f"link cap: head peak +{grown} KiB for 512 MiB of unread replies")
        if not sanitized(pid):
            # the cap, the reply being encoded and sealed, and the socket's own buffers
            assert grown < 6 * LINK_MAX_OUTQ // 1024, f"the head grew by {grown} KiB"
    finally:
        p.close()
    assert c.head.alive(), c.head.read_log()[-3000:]
    ok, out = _driver_works(c)
    assert ok, out


def test_a_member_opens_no_more_clients_than_the_cap(make_cluster):
    """An authenticated member could open any number of clients on the head
    (each a session there, with no fd to bound it as a daemon's own clients
    are): past --max-member-clients a new one is closed as it opens (the
    head sends close_client), the others are served, and one that ends
    makes room."""
    c = make_cluster(members=0, node_timeout=60, start=False)  # a quiet fake member is not lost meanwhile
    c.head.args += ["--max-member-clients", "3"]
    c.start()
    p = _ReadingPeer(c)
    try:
        p.push("join", _join("127.0.3.9"))
        assert p.message()[1] == "welcome"

        def opened(vconns):
            """vconn -> "served" (its hello answered) or "closed" (close_client)."""
            for v in vconns:
                p.push("client_open", {"vconn": v, "pid": os.getpid(), "uid": os.getuid()})
                p.request(v, 1, "hello", {"role": "driver", "pid": os.getpid()})
            seen = {}
            while len(seen) < len(vconns):
                m = p.message()
                assert m is not None, "the head closed the link"
                if m[1] == "client_frame" and mp_unpack(m[2]["frame"])[0][:2] == [1, 1]:
                    seen[m[2]["vconn"]] = "served"
                elif m[1] == "close_client":
                    seen[m[2]["vconn"]] = "closed"
            return seen

        assert opened([1, 2, 3, 4]) == {1: "served", 2: "served", 3: "served", 4: "closed"}
        p.push("client_closed", {"vconn": 1})
        assert opened([5]) == {5: "served"}
        assert "the most one node may have" in c.head.read_log()
    finally:
        p.close()


def test_members_behind_one_address_share_the_per_ip_cap_and_still_join(make_cluster):
    """Members on one host, or behind one NAT, reach the head from one
    address and share --max-handshakes-per-ip (docs/RELIABILITY.md): while
    that many of their connections are in the handshake, another is closed
    at accept, and its member tries again a second later. With the cap at 1
    and an idle connection from that address holding it, three members are
    refused; once it goes, all three join."""
    c = make_cluster(members=0, node_timeout=60, start=False)
    c.head.args += ["--max-handshakes-per-ip", "1"]
    c.start()
    idle = socket.create_connection((c.head_ip, c.port), timeout=5)  # from 127.0.0.1, as the members' links
    try:
        assert idle.recv(1)  # its challenge came: it is in the handshake
        for _ in range(3):
            c.add_member(wait=False)
        refused = "too many node connections in the handshake from that address"
        assert wait_until(lambda: c.head.read_log().count(refused) >= 3, 10), c.logs()
        assert len(c.alive_nodes()) == 1
    finally:
        idle.close()
    c.wait_alive(4, 15)


def test_a_member_local_call_may_not_take_another_clients_object_id(make_cluster):
    """A member's record of a local call is checked as a client's submit
    is: its object id must be the client's own (the first 8 bytes its hello
    gave). One naming a driver's next id made that object on the head, and
    the driver's put of it then failed `exists`; now the record is refused
    (bad_request, over the link to that client) and the put goes through.
    A record with the client's own id is taken."""
    c = make_cluster(members=0, node_timeout=60)
    p = _ReadingPeer(c)
    with Conn(c.head.socket) as d:
        ids = Ids(d.hello())
        theirs = ids.obj()  # not used yet
        p.push("join", _join("127.0.3.10"))
        assert p.message()[1] == "welcome"
        p.push("client_open", {"vconn": 1, "pid": os.getpid(), "uid": os.getuid()})
        p.request(1, 1, "hello", {"role": "driver", "pid": os.getpid()})
        hello = p.client_reply(1, 1)
        assert hello[2] is None, hello
        mine = Ids(hello[3]).obj()
        before = c.head.status()["objects"]["count"]
        for obj in (theirs, mine):
            submit = mp_pack(
                [
                    0,
                    7,
                    "submit",
                    {"actor": b"\0" * 16, "obj": obj, "method": "m", "args": b"", "objects": [], "actors": []},
                ]
            )
            p.push("local_batch", {"msgs": [[1, 1, submit]]})
            reply = p.client_reply(1, 7)
            if obj is theirs:
                assert reply[2] is not None and reply[2]["code"] == "bad_request", reply
                assert "'obj'" in reply[2]["message"], reply
            else:
                assert reply[2] is None, reply
        assert c.head.status()["objects"]["count"] == before + 1  # only the member client's own
        assert d.call("put", {"obj": theirs, "data": b"v"}) == {}
        assert d.call("get", {"objs": [theirs], "timeout_ms": 0})["values"][0] == [0, b"v"]
    p.close()
