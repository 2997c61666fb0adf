# SPDX-License-Identifier: Apache-2.0
"""Direct calls (docs/DESIGN.md, "Direct calls"; on unless
BEAM_DIRECT_CALLS=0): a driver's plain calls to a serial actor on its node
go to the worker's own socket. Each test turns the switch on in this driver
(direct.ON, whatever the suite's environment says) and checks what Ray
promises is unchanged: order across the switch both ways, errors, deaths
and ray.kill with the same exceptions and texts as through beamd, refs that
leave the driver, and a stranger at the worker's socket refused; and that
beamd still counts them from the worker's call board (`status`: an actor's
running calls, also in beamctl's table, direct_calls, results_pushed, a
member's on the head with its local_calls),
and refuses a board that is not one."""

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import textwrap
import threading
import time

import pytest

from beamkit.daemon import driver_env, run_driver, start_driver
from beamkit.procs import read_line, wait_until
from ray._private import direct

pytestmark = pytest.mark.skipif(os.environ.get("BEAM_REAL_RAY") == "1", reason="beam's own path")


@pytest.fixture
def ray_direct(ray_start, monkeypatch):
    monkeypatch.setattr(direct, "ON", True)
    return ray_start


def _log_actor(ray):
    @ray.remote
    class Log:
        def __init__(self):
            self.seen = []

        def add(self, x):
            self.seen.append(x)
            return x

        def add_value_of(self, x):  # x: a ref passed at top level, resolved
            self.seen.append(x)
            return x

        def seen_all(self):
            return list(self.seen)

        def pid(self):
            return os.getpid()

        def sleep(self, s):
            time.sleep(s)
            return s

        def fail(self):
            raise ValueError("nope")

        def refs(self):
            return [ray.put(41)]

        def kept(self):  # the outcomes its direct Server keeps for callers
            import gc

            return [len(o.retained) for o in gc.get_objects() if isinstance(o, direct.Server)]

    return Log


def _state(handle):
    return direct._actors.get(handle._ray_actor_id_bytes)


def _go_direct(ray, a):
    """A few sync calls: through beamd, then the open call, then direct."""
    for _ in range(4):
        ray.get(a.pid.remote())
    st = _state(a)
    assert st is not None and st.conn is not None and st.direct
    return st


def test_calls_go_direct_and_keep_order_across_both_switches(ray_direct):
    ray = ray_direct
    a = _log_actor(ray).remote()
    st = _go_direct(ray, a)
    sent = st.sent
    expect, refs = [], []
    for i in range(60):
        if i % 7 == 3:
            refs.append(a.add_value_of.remote(ray.put(i)))  # a ref in its args: through beamd
        else:
            refs.append(a.add.remote(i))
        expect.append(i)
    assert ray.get(refs) == expect
    assert ray.get(a.seen_all.remote()) == expect
    assert st.sent > sent  # most of them went direct


def test_a_deep_pipeline_of_large_values_fills_no_socket_for_good(ray_direct):
    """Calls and results larger than the socket's buffers, none read until
    all are sent: the driver reads results while its writes wait."""
    ray = ray_direct
    a = _log_actor(ray).remote()
    st = _go_direct(ray, a)
    sent = st.sent
    big = b"x" * 200_000
    refs = [a.sleep.remote(0) if i % 50 == 0 else a.add.remote(big) for i in range(300)]
    assert st.sent - sent == 300
    got = ray.get(refs, timeout=60)
    assert got[0] == 0 and got[1] == big and got[-1] == big


def test_errors_and_timeouts_as_through_beamd(ray_direct):
    ray = ray_direct
    a = _log_actor(ray).remote()
    st = _go_direct(ray, a)
    with pytest.raises(ValueError, match="nope") as e:
        ray.get(a.fail.remote())
    assert isinstance(e.value, ray.exceptions.RayTaskError)
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(a.sleep.remote(2), timeout=0.05)
    assert ray.get([a.add.remote(1), a.add.remote(2)]) == [1, 2]
    assert st.direct


def _death_text(ray, a):
    """The error of a call made after the actor's death (through beamd)."""
    with pytest.raises(ray.exceptions.ActorDiedError) as e:
        ray.get(a.pid.remote(), timeout=30)
    return str(e.value)


def test_worker_death_mid_call_fails_with_beamds_cause(ray_direct):
    ray = ray_direct
    a = _log_actor(ray).remote()
    _go_direct(ray, a)
    pid = ray.get(a.pid.remote())
    pending = a.sleep.remote(30)
    queued = a.add.remote(1)
    os.kill(pid, signal.SIGKILL)
    errors = []
    for r in (pending, queued):
        with pytest.raises(ray.exceptions.ActorDiedError) as e:
            ray.get(r, timeout=30)
        assert isinstance(e.value, ray.exceptions.RayActorError)
        errors.append(str(e.value))
    later = _death_text(ray, a)
    assert errors == [later, later]


def test_ray_kill_fails_pending_direct_calls(ray_direct):
    ray = ray_direct
    a = _log_actor(ray).remote()
    _go_direct(ray, a)
    pending = a.sleep.remote(30)
    ray.kill(a)
    with pytest.raises(ray.exceptions.ActorDiedError, match="ray.kill") as e:
        ray.get(pending, timeout=30)
    assert str(e.value) == _death_text(ray, a)


def test_refs_leaving_the_driver_are_promoted(ray_direct):
    ray = ray_direct
    Log = _log_actor(ray)
    a, b = Log.remote(), Log.remote()
    _go_direct(ray, a)
    done = a.add.remote(5)
    assert ray.get(done) == 5
    assert ray.get(b.add_value_of.remote(done)) == 5  # got here, then passed on
    slow = a.sleep.remote(0.3)
    assert ray.get(b.add_value_of.remote(slow)) == 0.3  # passed on while pending
    boxed = ray.put([a.add.remote(7)])
    assert ray.get(ray.get(boxed)[0]) == 7
    r = a.add.remote(8)
    ready, rest = ray.wait([r], timeout=30)
    assert ready == [r] and rest == [] and ray.get(r) == 8
    failed = a.fail.remote()
    with pytest.raises(ValueError, match="nope"):
        ray.get(b.add_value_of.remote(failed))
    inner = ray.get(a.refs.remote())  # a result that carries a ref: read from beamd
    assert ray.get(inner[0]) == 41
    big = a.add.remote(b"y" * 300_000)  # past shm.MIN_BYTES: put through shared memory
    assert len(ray.get(big)) == 300_000
    assert ray.get(b.add_value_of.remote(big)) == b"y" * 300_000


def test_a_direct_ref_is_counted_once_promoted_and_forgotten_when_it_dies(ray_direct):
    """A direct ref has no count in refcount's table (its death is the
    forget the worker gets on the next frame); a second ObjectRef of its id
    promotes it first, and from then on it is counted as any ref."""
    from ray._private import refcount
    from ray._private.object_ref import ObjectRef

    ray = ray_direct
    a = _log_actor(ray).remote()
    _go_direct(ray, a)

    r = a.add.remote(1)
    assert direct.is_direct(r._id) and r._id not in refcount._counts[0]
    assert ray.get(r) == 1
    copy = ObjectRef(r.binary())
    assert not direct.is_direct(r._id) and refcount._counts[0][r._id] == 2
    del r
    assert ray.get(copy) == 1 and refcount._counts[0][copy._id] == 1
    oid = copy._id
    del copy
    assert oid not in refcount._counts[0]
    for k in range(50):
        assert ray.get(a.add.remote(k)) == k  # each one dies: forgotten on the next frame
    assert not direct._refs
    assert ray.get(a.kept.remote()) == [0]  # every forget came before this call ran


def test_wait_on_direct_refs_is_answered_in_the_driver(ray_direct):
    """ray.wait of direct refs only: the results come on the socket answer
    it, none promoted, and a ready one does not wait behind the worker's
    running call (issue 25's program: two quick calls, two slow ones)."""
    ray = ray_direct
    a = _log_actor(ray).remote()
    _go_direct(ray, a)
    refs = [a.sleep.remote(0.01), a.fail.remote(), a.sleep.remote(3), a.sleep.remote(3)]
    assert all(direct.is_direct(r._id) for r in refs)
    t0 = time.monotonic()
    ready, rest = ray.wait(refs, num_returns=2, timeout=10)
    assert time.monotonic() - t0 < 2.5
    assert ready == refs[:2] and rest == refs[2:]  # an error is ready too
    assert all(direct.is_direct(r._id) for r in refs)  # none left the driver
    t0 = time.monotonic()
    ready, rest = ray.wait(refs[2:], timeout=0.2)
    assert ready == [] and rest == refs[2:] and time.monotonic() - t0 < 2
    ready, rest = ray.wait(refs, num_returns=4, timeout=30)
    assert ready == refs and rest == []
    assert ray.get(refs[0]) == 0.01 and ray.get(refs[2:]) == [3, 3]
    with pytest.raises(ValueError, match="nope"):
        ray.get(refs[1])


def test_values_that_came_outlive_the_actor(ray_direct):
    """Killed right after its calls returned: the driver owns their values,
    so refs passed on afterwards still carry them (as in Ray)."""
    ray = ray_direct
    Log = _log_actor(ray)
    a, b = Log.remote(), Log.remote()
    _go_direct(ray, a)
    refs = [a.add.remote(k) for k in range(10)]
    assert ray.get(refs) == list(range(10))
    ray.kill(a)
    assert [ray.get(b.add_value_of.remote(r), timeout=30) for r in refs] == list(range(10))
    assert ray.get(ray.put(refs))[3] == refs[3]


def test_errors_that_came_outlive_the_actor(ray_direct):
    """A task error that came, passed on after its worker died: the task's
    error, as through beamd (the driver puts it under the ref's id), not
    the worker's death."""
    ray = ray_direct
    Log = _log_actor(ray)
    a, b = Log.remote(), Log.remote()
    _go_direct(ray, a)
    failed = a.fail.remote()
    assert direct.is_direct(failed._id)
    with pytest.raises(ValueError, match="nope"):
        ray.get(failed)
    pid = ray.get(a.pid.remote())
    os.kill(pid, signal.SIGKILL)
    _death_text(ray, a)  # beamd knows the worker died
    for use in (
        lambda: ray.get(b.add_value_of.remote(failed), timeout=30),
        lambda: ray.get(ray.get(ray.put([failed]))[0]),
    ):
        with pytest.raises(ValueError, match="nope") as e:
            use()
        assert isinstance(e.value, ray.exceptions.RayTaskError)
        assert not isinstance(e.value, ray.exceptions.ActorDiedError)


def test_dropping_the_handle_lets_direct_calls_finish(ray_direct):
    ray = ray_direct
    a = _log_actor(ray).remote()
    _go_direct(ray, a)
    refs = [a.sleep.remote(0.05) for _ in range(5)]
    del a
    assert ray.get(refs, timeout=30) == [0.05] * 5


def _address(st):
    return st.address


def test_a_stranger_at_the_workers_socket_is_refused(ray_direct):
    ray = ray_direct
    a = _log_actor(ray).remote()
    st = _go_direct(ray, a)
    address = _address(st)
    # the wrong secret: the worker closes the connection, the actor lives
    with pytest.raises(ConnectionError):
        direct.connect(address, b"x" * 32)
    # a proof of a nonce it was not sent
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(address)
    s.recv(16)
    s.sendall(hmac.new(b"y" * 32, b"z" * 16, hashlib.sha256).digest())
    assert s.recv(5) == b""
    s.close()
    assert ray.get(a.add.remote(3)) == 3
    if os.getuid() == 0:
        # another uid: closed before it is sent anything (SO_PEERCRED)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.settimeout(10)
                c.connect(address)
                code = 0 if c.recv(16) == b"" else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    assert ray.get(a.add.remote(4)) == 4


def test_not_direct_where_the_rule_says_beamd(ray_direct):
    ray = ray_direct
    Log = _log_actor(ray)
    for opts in ({"max_concurrency": 2}, {"max_restarts": 1}):
        h = Log.options(**opts).remote()
        for _ in range(4):
            ray.get(h.pid.remote())
        assert _state(h) is None
    named = Log.options(name="direct-named").remote()
    ray.get(named.pid.remote())
    other = ray.get_actor("direct-named")
    for _ in range(4):
        ray.get(other.pid.remote())
    assert ray.get(other.add.remote(1)) == 1


def _actor_row(beamd, handle):
    for row in beamd.status()["actors"]:
        if row["actor_id"] == handle._actor_id.hex():
            return row
    return None


def _board_maps(pid):
    """Mappings of call boards in process pid."""
    with open(f"/proc/{pid}/maps") as f:
        return sum("memfd:beam-board" in line for line in f)


def test_beamd_counts_direct_calls_from_the_call_board(ray_direct, beamd):
    """The counterparts of test_result_push's and test_faults' counters:
    beamd sees no direct call, but reads the worker's board when asked."""
    ray = ray_direct
    a = _log_actor(ray).remote()
    st = _go_direct(ray, a)
    before = beamd.status()
    sent = st.sent
    for i in range(30):
        assert ray.get(a.add.remote(i)) == i
    after = beamd.status()
    assert st.sent - sent == 30  # every one direct
    assert after["direct_calls"] - before["direct_calls"] == 30
    assert after["results_pushed"] - before["results_pushed"] >= 30
    assert after["gets"] == before["gets"]  # not one get reached beamd
    assert _actor_row(beamd, a)["running"] == 0  # counted finished before its result was sent
    # a direct call that runs is one of the actor's calls running
    slow = a.sleep.remote(30)
    assert direct.is_direct(slow._id)
    assert wait_until(lambda: _actor_row(beamd, a)["running"] == 1, 10), _actor_row(beamd, a)
    queued = a.add.remote(1)  # sent, not started: the worker runs one at a time
    assert _actor_row(beamd, a)["running"] == 1
    # and beamctl's table says so (RUNNING, QUEUED)
    out = subprocess.run(
        [os.environ["BEAM_BEAMCTL"], "--socket", beamd.socket, "status"], capture_output=True, text=True, timeout=30
    )
    row = next(line.split() for line in out.stdout.splitlines() if a._actor_id.hex() in line)
    assert row[5:7] == ["1", "0"], out.stdout
    # the board's counts outlive the worker, which is killed mid-call
    beamd_pid = beamd.status()["pid"]
    assert _board_maps(beamd_pid) == 1
    ray.kill(a)
    for r in (slow, queued):
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(r, timeout=30)
    assert wait_until(lambda: _board_maps(beamd_pid) == 0, 10)
    end = beamd.status()
    assert end["direct_calls"] - before["direct_calls"] == 31
    assert end["results_pushed"] - after["results_pushed"] >= 0
    assert all(row["running"] == 0 for row in end["actors"])


def test_a_board_that_is_not_one_is_refused(ray_direct, beamd):
    """The `board` request (docs/PROTOCOL.md): only from an actor's worker,
    only a sealed memfd of 4096 bytes, only once; each refusal is a clear
    error and the daemon and the worker go on."""
    ray = ray_direct
    import _beam

    @ray.remote
    class Boards:
        def pid(self):
            return os.getpid()

        def try_boards(self):
            from ray._private import worker as rtmod

            client = rtmod.runtime().client

            def ask(fd, size=4096):
                try:
                    client.request("board", {"fd": fd, "size": size}, 10)
                    return ["ok", ""]
                except _beam.RemoteError as e:
                    return list(e.args)

            r, w = os.pipe()
            plain = os.memfd_create("beam-board", os.MFD_CLOEXEC)  # not sealed: it could shrink
            os.ftruncate(plain, 4096)
            big, another = _beam.Board(), _beam.Board()
            out = {
                "pipe": ask(r),
                "unsealed": ask(plain),
                "size": ask(big.fileno(), 8192),
                "no_fd": ask(1 << 20),
                "second": ask(another.fileno()),  # the worker handed its own when it opened
            }
            for fd in (r, w, plain):
                os.close(fd)
            return out

    b = Boards.remote()
    _go_direct(ray, b)
    out = ray.get(b.try_boards.remote(), timeout=30)
    assert out["pipe"][0] == "bad_request" and "sealed" in out["pipe"][1], out
    assert out["unsealed"][0] == "bad_request" and "sealed" in out["unsealed"][1], out
    assert out["size"][0] == "bad_request" and "size" in out["size"][1], out
    assert out["no_fd"][0] == "denied" and "call board" in out["no_fd"][1], out
    assert out["second"][0] == "bad_request" and "second board" in out["second"][1], out
    # a driver is no actor's worker
    client, mine = ray._private.worker.runtime().client, _beam.Board()
    with pytest.raises(_beam.RemoteError) as e:
        client.request("board", {"fd": mine.fileno(), "size": 4096}, 10)
    assert e.value.args[0] == "denied"
    # the daemon and the worker go on, its calls still direct and counted
    before = beamd.status()["direct_calls"]
    assert ray.get(b.try_boards.remote(), timeout=30)["second"][0] == "bad_request"
    assert beamd.status()["direct_calls"] - before == 1


MEMBER_DRIVER = textwrap.dedent("""
    import json, sys, time
    import ray
    from ray._private import direct

    ray.init()

    @ray.remote(num_cpus=0)
    class Log:
        def add(self, x):
            return x

        def sleep(self, s):
            time.sleep(s)
            return s

    a = Log.options(resources={"node:127.0.0.2": 0.001}).remote()
    for _ in range(4):
        ray.get(a.add.remote(0), timeout=30)
    st = direct._actors[a._ray_actor_id_bytes]
    sent = st.sent
    got = [ray.get(a.add.remote(i), timeout=30) for i in range(30)]
    print("CALLED", json.dumps({"direct": st.direct, "sent": st.sent - sent, "got": got}), flush=True)
    slow = a.sleep.remote(60)
    print("RUNNING", a._actor_id.hex(), flush=True)
    sys.stdin.readline()
""")


def test_a_members_direct_calls_are_counted_by_the_head(cluster):
    """A driver and an actor on a member: the member's daemon adopts the
    worker's board (the head cannot open its fds) and sends its counts up,
    so the head's local_calls, direct_calls, results_pushed and the actor's
    running count them; a worker's last counts outlive it."""
    before = cluster.head.status()
    proc = start_driver(MEMBER_DRIVER, driver_env(cluster.members[0], BEAM_DIRECT_CALLS="1"), stdin=subprocess.PIPE)
    try:
        called = json.loads(read_line(proc, "CALLED ", timeout=60))
        assert called == {"direct": True, "sent": 30, "got": list(range(30))}
        actor = read_line(proc, "RUNNING ", timeout=30)

        seen = {}

        def counted():
            st = seen["status"] = cluster.head.status()
            row = next((r for r in st["actors"] if r["actor_id"] == actor), None)
            return (
                st["local_calls"] - before["local_calls"] >= 30
                and st["direct_calls"] - before["direct_calls"] >= 31  # and the warm-up's that went direct
                and st["results_pushed"] - before["results_pushed"] >= 30
                and row is not None
                and row["running"] == 1
            )

        assert wait_until(counted, 10), cluster.head.status()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
    # the driver is gone, and with it its actor: the totals keep its counts
    assert wait_until(lambda: all(r["running"] == 0 for r in cluster.head.status()["actors"]), 20)
    assert cluster.head.status()["direct_calls"] == seen["status"]["direct_calls"]


def test_a_ref_kept_from_an_earlier_session_leaves_this_ones_call_alone(ray_direct):
    """Ids start again with each beamd, so a ref kept from an earlier
    session (before a ray.shutdown and a ray.init against another beamd) can
    carry the id of one of this session's direct calls: its death is no
    forget of that call (found when a ref of the test before, dying late,
    made this session's pending call look lost)."""
    from ray._private import refcount

    ray = ray_direct
    a = _log_actor(ray).remote()
    _go_direct(ray, a)
    pending = a.sleep.remote(0.3)
    stale = type(pending)._here(pending._id)  # the same id, made in an earlier session
    stale._epoch = refcount._epoch - 1
    del stale
    assert ray.get(pending, timeout=30) == 0.3


OWNER_DRIVER = """
import os, time
import ray
ray.init(namespace="owners")

@ray.remote
class Slow:
    def pid(self):
        return os.getpid()

    def slow(self, s):
        time.sleep(s)
        return "done"

@ray.remote
class Keeper:
    def __init__(self):
        self.kept = None

    def hold(self, refs):
        self.kept = refs  # a ref inside a list stays a ref
        return True

    def get(self):
        try:
            return ("ok", ray.get(self.kept[0], timeout=30))
        except Exception as e:
            return (type(e).__name__, str(e))

w = Slow.options(name="w", lifetime="detached").remote()
k = Keeper.options(name="k", lifetime="detached").remote()
for _ in range(5):
    ray.get(w.pid.remote())  # through beamd, then direct (when the switch is on)
r = w.slow.remote(SECONDS)
if SECONDS == 0:
    ray.get(r)  # its value came before the owner ends
ray.get(k.hold.remote([r]))
os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize("direct_on", ["1", "0"])
@pytest.mark.parametrize("seconds", [2, 0])
def test_a_ref_whose_owner_died_before_its_value_came_raises_owner_died(ray_direct, direct_on, seconds):
    """Ray's ownership: a driver hands a ref of its call to another actor
    inside a list and dies (SIGKILL). If the call's value had not come, the
    holder's get raises OwnerDiedError (real Ray 2.43 does the same, checked
    with this program); a value that came before stays readable. Both paths:
    the call direct (promoted as its ref left) and through beamd."""
    ray = ray_direct
    out = run_driver(OWNER_DRIVER, env={"BEAM_DIRECT_CALLS": direct_on}, names={"SECONDS": seconds})
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    keeper = ray.get_actor("k", namespace="owners")
    kind, text = ray.get(keeper.get.remote(), timeout=60)
    if seconds:
        assert kind == "OwnerDiedError", text
        assert "owner has exited" in text
    else:
        assert (kind, text) == ("ok", "done")
    for name in ("k", "w"):
        ray.kill(ray.get_actor(name, namespace="owners"))


def _fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_callers_socket_and_its_early_wake_fd_close_with_its_end(ray_direct):
    """The worker holds an open caller's socket twice (its fd, and a dup
    whose EPOLLOUT edge is the early wake: docs/DESIGN.md, "Direct calls");
    when the caller's end closes, both close, and the calls after it go
    through beamd in order."""
    ray = ray_direct
    a = _log_actor(ray).remote()
    st = _go_direct(ray, a)
    pid = ray.get(a.pid.remote())
    assert ray.get(a.add.remote(1)) == 1
    with_conn = _fds(pid)
    with st.lock:
        direct._ended(st)  # as at the socket's end: closed, and this actor's calls go through beamd
    wait_until(lambda: _fds(pid) == with_conn - 2, timeout=10)
    assert ray.get([a.add.remote(i) for i in (2, 3)]) == [2, 3]
    assert ray.get(a.seen_all.remote()) == [1, 2, 3]
    assert _state(a).conn is None and _fds(pid) == with_conn - 2


def test_direct_conn_result_says_the_cpu_it_was_sent_from():
    """A result frame carries the CPU its sender ran on (`cpu`), which the
    reader keeps (`peer_cpu`, -1 before the first): where the caller's wait
    chooses the early wake's blocking read or poll."""
    import _beam

    s1, s2 = socket.socketpair()
    caller, worker = _beam.DirectConn(s1.detach()), _beam.DirectConn(s2.detach())
    lock = threading.Lock()
    pending, results = {b"a" * 28}, {}
    assert caller.peer_cpu == -1

    def send():
        worker.result(b"a" * 28, 0, b"va")

    t = threading.Thread(target=send)
    with lock:
        t.start()
        while not results:
            caller.read_results(lock, pending, results, 1000)
    t.join()
    assert results == {b"a" * 28: (0, b"va")}
    assert caller.peer_cpu in os.sched_getaffinity(0)  # a CPU the sender may run on, not -1
    worker.close()
    caller.close()


def test_direct_conn_frames_over_a_socketpair():
    """_beam.DirectConn, both ends: push frames out and back (a long bin as a
    memoryview of its frame), a frame larger than the socket takes kept and
    written whole as the peer reads, [] at a timeout, None at the end."""
    import _beam

    s1, s2 = socket.socketpair()
    a, b = _beam.DirectConn(s1.detach()), _beam.DirectConn(s2.detach())
    assert a.send("call", {"obj": b"o" * 28, "method": "m", "args": b"a", "forgets": []}) == 0
    assert a.call(b"p" * 28, "n", b"b", [b"f" * 28]) == 0  # the same frame, from arguments
    assert a.send("forget", {"objs": [b"f" * 28]}) == 0
    assert a.send("other", {"k": 1}) == 0
    # the known ops' params as tuples in their keys' order, another op's as a dict
    got = []
    while len(got) < 4:
        got += b.read(1000)
    assert got == [
        ("call", (b"o" * 28, "m", b"a", [])),
        ("call", (b"p" * 28, "n", b"b", [b"f" * 28])),
        ("forget", ([b"f" * 28],)),
        ("other", {"k": 1}),
    ]
    assert b.read(0) == []
    a.send("result", {"obj": b"o" * 28, "status": 0})  # a key missing: None
    assert b.read(1000) == [("result", (b"o" * 28, 0, None))]
    big = bytes(range(256)) * 40_000  # 10 MB: more than the socket's buffers
    left = b.result(b"o" * 28, 0, big)
    assert left > 0 and b.pending == left
    got = []
    while not got:
        got = a.read(1)
        b.flush()
    ((op, (obj, status, data)),) = got
    assert op == "result" and obj == b"o" * 28 and status == 0 and bytes(data) == big
    assert isinstance(data, memoryview) and b.pending == 0
    b.close()
    assert b.ended and b.fileno() == -1
    assert a.read(1000) is None and a.ended
    a.close()


def test_direct_conn_read_results_files_pending_results_with_the_lock_let_go():
    """DirectConn.read_results, a caller's read: the lock held on entry is
    let go while it waits (another thread takes it meanwhile) and held
    again when it files; a result for an obj in pending is taken out of it
    into results as (status, data), any other is dropped; it returns True
    (at its timeout too), None at the socket's end."""
    import _beam

    s1, s2 = socket.socketpair()
    caller, worker = _beam.DirectConn(s1.detach()), _beam.DirectConn(s2.detach())
    lock = threading.Lock()
    pending, results = {b"a" * 28, b"b" * 28}, {}
    taken = threading.Event()

    def other_thread():
        with lock:  # possible only while the reader waits
            taken.set()
            worker.result(b"a" * 28, 0, b"va")
            worker.result(b"z" * 28, 0, b"vz")  # not pending: dropped
            worker.send("other", {"k": 1})  # not a result: dropped

    with lock:
        t = threading.Thread(target=other_thread)
        t.start()
        got = None
        while b"a" * 28 not in results:
            got = caller.read_results(lock, pending, results, 1000)
        assert lock.locked()  # held again on return
    t.join()
    assert taken.is_set() and got is True
    assert pending == {b"b" * 28} and results == {b"a" * 28: (0, b"va")}
    with lock:
        assert caller.read_results(lock, pending, results, 0) is True  # nothing came
        worker.close()
        assert caller.read_results(lock, pending, results, 1000) is None
    assert pending == {b"b" * 28} and len(results) == 1
    caller.close()
