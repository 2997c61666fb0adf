# SPDX-License-Identifier: Apache-2.0
"""Calls that stay on a member (docs/DESIGN.md, "Calls that stay on a
member"): a driver on a member calling an actor whose worker runs on that
same member. The member writes the call to the worker itself and answers
the driver's get from the results it keeps; the head records every such
call (`local_calls` in `beamctl status --json` counts them) and stays the
one that fails them when the actor dies.

What is checked: that the local way is really taken; order of many calls
across the actor becoming ready; a kill (by the driver, and from the head)
during local calls; a worker crash mid-call; results passed to an actor on
another node; a get mixing local and remote results; an actor calling back
into another local actor; threaded and asyncio actors; what the member
holds for the head (a local call's submit and result, sent up together)
reaching it when the member falls quiet, and a member lost while it holds
them.

The drivers here run with direct calls off (BEAM_DIRECT_CALLS=0): the
local way is the member's path for calls through beamd, which a direct
call skips; a member's direct calls are in test_direct_calls.py."""

import json
import os
import subprocess
import textwrap

import cloudpickle
import pytest

from beamkit.client import Conn, Ids
from beamkit.daemon import driver_env, run_driver, start_driver
from beamkit.link import SealedPeer
from beamkit.procs import beam_processes, read_line, wait_until

HEAD_IP, M1 = "127.0.0.1", "127.0.0.2"

PRELUDE = textwrap.dedent("""
    import json, os, signal, sys, time
    import ray
    ray.init()

    def on(ip):
        return {"resources": {"node:" + ip: 0.001}}

    HEAD, M1 = "127.0.0.1", "127.0.0.2"

    @ray.remote(num_cpus=0)
    class Log:
        def __init__(self, slow_init=0.0):
            time.sleep(slow_init)
            self.seen = []

        def add(self, tag):
            self.seen.append(tag)
            return tag

        def seen_all(self):
            return self.seen

        def pid(self):
            return os.getpid()

        def sleep(self, s, tag=None):
            time.sleep(s)
            return tag

        def get_of(self, refs):
            return ray.get(refs[0]) + 1

        def call_other(self, other, k):
            return ray.get(other.add.remote(k)) * 10

    def out(**kw):
        sys.stdout.write("RESULT " + json.dumps(kw) + "\\n")
        sys.stdout.flush()

    def outcome(ref):  # how ray.get of ref ends: "value", or "died" (ActorDiedError)
        try:
            ray.get(ref, timeout=20)
            return "value"
        except ray.exceptions.ActorDiedError:
            return "died"
""")


@pytest.fixture(autouse=True)
def through_beamd(monkeypatch):
    monkeypatch.setenv("BEAM_DIRECT_CALLS", "0")


def run_on_member(c, body, timeout=60):
    r = run_driver(PRELUDE + textwrap.dedent(body), driver_env(c.members[0]), timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr + c.logs()
    return json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0])


def local_calls(c):
    return c.head.status()["local_calls"]


def start_on_member(c, body):
    """A driver on the member that goes on running (stdin, stdout piped)."""
    return start_driver(PRELUDE + textwrap.dedent(body), driver_env(c.members[0]), stdin=subprocess.PIPE)


def stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)


QUIET_CALLS = """
    @ray.remote(num_cpus=0)
    class Big:
        def make(self, n):
            return b"z" * n

    a = Big.options(**on(M1)).remote()
    ray.get(a.make.remote(1), timeout=20)
    time.sleep(0.3)  # the warm-up's release goes up now, not later
    refs = [a.make.remote(40000) for _ in range(3)]  # under the bytes held at most
    got = ray.get(refs, timeout=20)
    print("CALLED", sum(map(len, got)), flush=True)
    sys.stdin.readline()  # quiet: its refs kept, nothing more sent
"""


def test_local_way_is_taken_and_counted(cluster):
    before = local_calls(cluster)
    out = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        pid = ray.get(a.pid.remote(), timeout=20)
        got = [ray.get(a.add.remote(i)) for i in range(50)]
        out(pid=pid, got=got, seen=ray.get(a.seen_all.remote()))
    """,
    )
    assert out["got"] == list(range(50)) and out["seen"] == list(range(50))
    # the first call may go through the head (sent before the actor was
    # ready); the 50 after it were run by the member
    assert local_calls(cluster) - before >= 50
    assert wait_until(lambda: not beam_processes(cluster.members[0].socket), 10)


def test_order_across_the_actor_becoming_ready(cluster):
    """Calls submitted before the actor is ready (through the head), while
    it becomes ready and after (locally), from one caller, run in order."""
    out = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote(0.5)
        refs = []
        t = time.time()
        i = 0
        while time.time() - t < 1.5:   # submits straddle the ready
            refs.append(a.add.remote(i))
            i += 1
            if i % 50 == 0:
                ray.get(refs[-1])      # some gets in the middle
            time.sleep(0.0005)
        refs += [a.add.remote(j) for j in range(i, i + 300)]
        got = ray.get(refs, timeout=60)
        out(n=i + 300, got=got, seen=ray.get(a.seen_all.remote()))
    """,
    )
    n = out["n"]
    assert out["got"] == list(range(n))
    assert out["seen"] == list(range(n))


def test_threaded_and_async_actors(cluster):
    out = run_on_member(
        cluster,
        """
        import asyncio

        @ray.remote(num_cpus=0, max_concurrency=4)
        class Pool:
            def slow(self, s, k):
                time.sleep(s)
                return k

        @ray.remote(num_cpus=0)
        class Aio:
            async def slow(self, s, k):
                await asyncio.sleep(s)
                return k

        p = Pool.options(**on(M1)).remote()
        q = Aio.options(**on(M1)).remote()
        ray.get([p.slow.remote(0, 0), q.slow.remote(0, 0)], timeout=20)
        t = time.time()
        got = ray.get([p.slow.remote(0.4, k) for k in range(4)] + [q.slow.remote(0.4, k) for k in range(8)],
                      timeout=30)
        out(got=got, took=time.time() - t)
    """,
    )
    assert out["got"] == list(range(4)) + list(range(8))
    assert out["took"] < 3.2  # they ran at once, not one after the other (8 x 0.4 s)


def test_kill_during_local_calls(cluster):
    out = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        ray.get(a.pid.remote(), timeout=20)
        done = ray.get(a.add.remote("before"))
        pending = [a.sleep.remote(5, k) for k in range(3)]
        time.sleep(0.3)
        ray.kill(a)
        errs = [outcome(r) for r in pending]
        after = outcome(a.add.remote("after"))
        out(done=done, errs=errs, after=after)
    """,
    )
    assert out == {"done": "before", "errs": ["died"] * 3, "after": "died"}


def test_kill_from_the_head_during_local_calls(cluster):
    """A kill the member does not see: the head keeps the local calls open
    until the worker is gone, and they fail then."""
    out = run_on_member(
        cluster,
        """
        a = Log.options(name="victim", lifetime="detached", **on(M1)).remote()
        ray.get(a.pid.remote(), timeout=20)
        pending = [a.sleep.remote(5, k) for k in range(3)]
        time.sleep(0.3)
        import subprocess
        ns = ray.get_runtime_context().namespace
        code = f"import ray; ray.init(); ray.kill(ray.get_actor('victim', namespace={ns!r}))"
        env = dict(os.environ, BEAM_SOCKET=os.environ["HEAD_SOCKET"], RAY_ADDRESS=os.environ["HEAD_SOCKET"])
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)
        errs = [outcome(r) for r in pending]
        out(errs=errs)
    """.replace('os.environ["HEAD_SOCKET"]', repr(cluster.head.socket)),
    )
    assert out["errs"] == ["died"] * 3


def test_worker_crash_mid_call(cluster):
    out = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        pid = ray.get(a.pid.remote(), timeout=20)
        ok = ray.get(a.add.remote(1))
        slow = a.sleep.remote(5)
        queued = a.add.remote(2)
        time.sleep(0.3)
        os.kill(pid, signal.SIGKILL)  # the worker crashes mid-call, one more call queued behind
        res = [outcome(r) for r in (slow, queued)]
        out(ok=ok, res=res)
    """,
    )
    assert out == {"ok": 1, "res": ["died", "died"]}


def test_results_to_another_node_and_mixed_gets(cluster):
    out = run_on_member(
        cluster,
        """
        here = Log.options(**on(M1)).remote()
        far = Log.options(**on(HEAD)).remote()
        ray.get([here.pid.remote(), far.pid.remote()], timeout=20)
        r_local = here.add.remote(41)
        r_far = far.add.remote(7)
        mixed = ray.get([r_local, r_far, here.add.remote(2)], timeout=20)
        # a local result passed (inside a list, so as a ref) to an actor on the head
        passed = ray.get(far.get_of.remote([here.add.remote(99)]), timeout=20)
        # and a far result to the local actor
        back = ray.get(here.get_of.remote([far.add.remote(5)]), timeout=20)
        # a local result as a direct argument (resolved before the call)
        direct = ray.get(far.add.remote(here.add.remote(3)), timeout=20)
        ready, _ = ray.wait([r_local, r_far], num_returns=2, timeout=20)
        out(mixed=mixed, passed=passed, back=back, direct=direct, ready=len(ready))
    """,
    )
    assert out == {"mixed": [41, 7, 2], "passed": 100, "back": 6, "direct": 3, "ready": 2}


def test_actor_calls_back_into_another_local_actor(cluster):
    before = local_calls(cluster)
    out = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        b = Log.options(**on(M1)).remote()
        ray.get([a.pid.remote(), b.pid.remote()], timeout=20)
        got = [ray.get(a.call_other.remote(b, k), timeout=20) for k in range(20)]
        out(got=got, seen=ray.get(b.seen_all.remote()))
    """,
    )
    assert out["got"] == [k * 10 for k in range(20)]
    assert out["seen"] == list(range(20))
    # the worker's own calls into b went the local way too
    assert local_calls(cluster) - before >= 40


def test_get_timeout_then_value_and_large_results(cluster):
    out = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        ray.get(a.pid.remote(), timeout=20)
        r = a.sleep.remote(1.0, "late")
        try:
            ray.get(r, timeout=0.1)
            first = "value"
        except ray.exceptions.GetTimeoutError:
            first = "timeout"
        polled = ray.wait([r], timeout=0)[0]
        late = ray.get(r, timeout=20)
        # a result too large to be kept on the member: the head answers its get
        big = ray.get(a.add.remote(b"x" * (20 << 20)), timeout=60)
        small = ray.get(a.add.remote(b"y" * 1000), timeout=20)
        out(first=first, polled=len(polled), late=late, big=len(big), small=len(small))
    """,
    )
    assert out == {"first": "timeout", "polled": 0, "late": "late", "big": 20 << 20, "small": 1000}


def test_detached_named_actor_outlives_its_owner_and_serves_locally(cluster):
    out = run_on_member(
        cluster,
        """
        a = Log.options(name="keeper", namespace="loc", lifetime="detached", **on(M1)).remote()
        ray.get(a.add.remote("from the owner"), timeout=20)
        out(ok=1)
    """,
    )
    before = local_calls(cluster)
    out = run_on_member(
        cluster,
        """
        a = ray.get_actor("keeper", namespace="loc")
        got = [ray.get(a.add.remote(i), timeout=20) for i in range(10)]
        seen = ray.get(a.seen_all.remote(), timeout=20)
        ray.kill(a)
        out(got=got, seen=seen)
    """,
    )
    assert out["got"] == list(range(10))
    assert out["seen"] == ["from the owner"] + list(range(10))
    assert local_calls(cluster) - before >= 10
    assert wait_until(lambda: not beam_processes(cluster.members[0].socket), 10)


def test_owner_gone_with_local_calls_pending(cluster):
    """The driver ends with local calls still running: its actor dies with
    it, and the member forgets what it kept for that driver."""
    run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        out(pid=ray.get(a.pid.remote(), timeout=20), refs=[a.sleep.remote(3) for _ in range(3)] and 3)
    """,
    )
    assert wait_until(lambda: not beam_processes(cluster.members[0].socket), 15)
    # the member serves the next driver as before
    out2 = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        out(got=[ray.get(a.add.remote(i), timeout=20) for i in range(5)])
    """,
    )
    assert out2["got"] == list(range(5))


def test_a_quiet_member_sends_up_what_it_holds(cluster):
    """Three local calls, then nothing more from the member: what it held
    for them (their submits and results) still reaches the head, which
    then holds the results' bytes and counts the calls."""
    before = cluster.head.status()
    drv = start_on_member(cluster, QUIET_CALLS)
    try:
        assert read_line(drv, "CALLED ") == str(3 * 40000)

        def arrived():
            st = cluster.head.status()
            return (
                st["local_calls"] - before["local_calls"] >= 3
                and st["objects"]["bytes"] - before["objects"]["bytes"] >= 3 * 40000
            )

        assert wait_until(arrived, 10), (cluster.head.status(), cluster.logs())
        assert drv.poll() is None  # (the driver was still there, sending nothing)
    finally:
        stop(drv)


def test_member_lost_while_it_holds_local_calls(cluster):
    """The member dies right after local calls finished, with their records
    perhaps still held there: the head loses the node and forgets its calls
    (its object table back to what it held before), and serves on."""
    before = cluster.head.status()["objects"]["count"]
    m1 = cluster.node_id(cluster.members[0])
    drv = start_on_member(cluster, QUIET_CALLS.replace("40000", "1000"))
    try:
        assert read_line(drv, "CALLED ") == str(3 * 1000)
        cluster.members[0].kill9()
        cluster.members[0].expect_signal = True
        assert cluster.wait_dead(m1, 2 * cluster.node_timeout + 5)
        assert wait_until(lambda: cluster.head.status()["objects"]["count"] == before, 10), cluster.head.status()
    finally:
        stop(drv)
    r = run_driver(
        PRELUDE
        + textwrap.dedent("""
        a = Log.options(**on(HEAD)).remote()
        out(got=ray.get(a.add.remote(5), timeout=20))
    """),
        driver_env(cluster.head),
    )
    assert r.returncode == 0 and json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0]) == {"got": 5}, r.stderr


def test_kill_right_after_local_calls_keeps_their_results(cluster):
    """The driver kills its local actor as soon as its calls returned, while
    the member most likely still holds their records for the head: the kill
    sends them up first, so the head holds the very results the driver got
    (an actor on the head reads them) and the calls are not failed."""
    out = run_on_member(
        cluster,
        """
        a = Log.options(**on(M1)).remote()
        far = Log.options(**on(HEAD)).remote()
        ray.get([a.pid.remote(), far.pid.remote()], timeout=20)
        refs = [a.add.remote(k) for k in range(20)]
        got = ray.get(refs, timeout=20)
        ray.kill(a)
        seen = [ray.get(far.get_of.remote([r]), timeout=20) - 1 for r in refs]
        after = outcome(a.add.remote("after"))
        out(got=got, seen=seen, after=after)
    """,
    )
    assert out == {"got": list(range(20)), "seen": list(range(20)), "after": "died"}


OWNER = """
    a = Log.options(**on(M1)).remote()
    ray.get(a.add.remote("warm"), timeout=20)  # ready: its calls from here stay on the member
    x = ray.put("mine")
    print("IDS", a._ray_actor_id_bytes.hex(), x.hex(), flush=True)
    sys.stdin.readline()
    out(mine=ray.get(x, timeout=20), seen=ray.get(a.seen_all.remote(), timeout=20))
"""


def _until_result(conn, msgid=99):
    """Every message up to the reply to a status request sent now (beamd
    answers a client's requests in order, so what a submit sent before it
    causes has come by then): (the `result` pushes, the `error` pushes)."""
    conn.send([0, msgid, "status", {}])
    results, errors = [], []
    while True:
        m = conn.recv()
        assert m is not None, "the connection closed"
        if m[0] == 1 and m[1] == msgid:
            return results, errors
        if m[0] == 2 and m[1] == "result":
            results.append(m[2])
        elif m[0] == 2 and m[1] == "error":
            errors.append(m[2]["message"])


def test_a_local_call_cannot_take_an_object_id_in_use(cluster):
    """A client on the member submits to an actor whose calls stay there,
    naming as its result an object that exists: another driver's put on
    the member, and its own put. The head refuses both, so the member must
    not run them: the actor never sees them, each driver's get of its put
    is its put's value (the member answers gets of local results itself),
    and the caller's pushed result is an error (none came at all before)."""
    drv = start_on_member(cluster, OWNER)
    try:
        actor_hex, x_hex = read_line(drv, "IDS ").split()
        actor, theirs = bytes.fromhex(actor_hex), bytes.fromhex(x_hex)
        with Conn(cluster.members[0].socket) as b:
            ids = Ids(b.hello())
            mine = ids.obj()
            b.call("put", {"obj": mine, "data": cloudpickle.dumps("b's own")})
            for obj in (theirs, mine):
                b.send(
                    [
                        0,
                        0,
                        "submit",
                        {
                            "actor": actor,
                            "obj": obj,
                            "method": "add",
                            "args": cloudpickle.dumps((("evil",), {})),
                            "push": True,
                        },
                    ]
                )
            drv.stdin.write("\n")
            drv.stdin.flush()
            out = json.loads(read_line(drv, "RESULT "))
            assert out == {"mine": "mine", "seen": ["warm"]}, out
            results, errors = _until_result(b)
            assert [(r["obj"], r["status"]) for r in results] == [(theirs, 3), (mine, 3)], (results, errors)
            assert len(errors) == 2, errors  # each refusal reported
            got = b.call("get", {"objs": [mine], "timeout_ms": 5000})["values"][0]
            assert got[0] == 0 and cloudpickle.loads(got[1]) == "b's own"
    finally:
        stop(drv)


def test_a_refused_submit_answers_its_pushed_result_on_the_member(cluster):
    """The hang: a submit with push whose object id exists got an `error`
    push and never its `result`, so its waiter waited forever. Through the
    member (to an actor it does not know, and to one on the head)."""
    with Conn(cluster.members[0].socket) as b:
        ids = Ids(b.hello())
        obj = ids.obj()
        b.call("put", {"obj": obj, "data": b"v"})
        b.send([0, 0, "submit", {"actor": b"\x00" * 16, "obj": obj, "method": "f", "args": b"", "push": True}])
        results, errors = _until_result(b)
        assert len(results) == 1 and results[0]["obj"] == obj and results[0]["status"] == 3, (results, errors)
        assert b"already in use" in results[0]["data"] and any("already in use" in e for e in errors)
        assert b.call("get", {"objs": [obj], "timeout_ms": 5000})["values"][0] == [0, b"v"]


def _fake_join(ip):
    return {
        "max_frame": 1 << 20,
        "node_id": os.urandom(28),
        "node_ip": ip,
        "hostname": "fake",
        "socket": "/nonexistent/beamd.sock",
        "resources": [],
        "gpus": [],
    }


# local_batch records ([kind, vconn, frame]) the head must refuse, with the link
BAD_BATCHES = [
    {"msgs": "not an array"},
    {"msgs": [[1, 5]]},
    {"msgs": [[3, 5, b"x"]]},
    {"msgs": [[-1, 5, b"x"]]},
    {"msgs": [[0, 0, b"x"]]},
    {"msgs": [[0, 1 << 40, b"x"]]},
    {"msgs": [[0, 5, "a str"]]},
    {"msgs": [b"a link message body, as records were before"]},
]


def test_malformed_local_batches_end_the_link(make_cluster):
    """Each record of a member's local_batch is checked: a malformed one
    ends that member's link, and so does a lone local_submit (not a
    message of its own now); well-formed records for clients the head does
    not know change nothing. The head serves on."""
    c = make_cluster(members=0, node_timeout=60)  # a silent fake member is not lost meanwhile
    cases = [("local_batch", b) for b in BAD_BATCHES] + [("local_submit", {"vconn": 5, "frame": b""})]
    for i, (op, params) in enumerate(cases):
        ip = f"127.0.3.{i + 1}"
        p = SealedPeer(c)
        p.push("join", _fake_join(ip))
        assert wait_until(lambda: ip in c.alive_nodes(), 5, 0.02), c.head.read_log()[-2000:]
        assert p.read_body(5) is not None  # (the welcome)
        # well-formed records: for a client the head does not know (nothing
        # happens), then for one it does, whose malformed submit it answers
        # with an error, over the link still open
        p.push("local_batch", {"msgs": [[1, 5, b"\x90"], [0, 5, b"\x90"]]})
        p.push("client_open", {"vconn": 6, "pid": 1, "uid": 0})
        p.push("local_batch", {"msgs": [[1, 6, b"\x90"]]})
        assert p.read_body(5) is not None, "no answer to the record"
        p.push(op, params)
        assert p.closed_by_peer(5), f"{params!r}: the head kept the link"
        p.close()
        assert c.head.alive(), c.head.read_log()[-3000:]
        assert ip not in c.alive_nodes()
    r = run_driver(
        PRELUDE
        + textwrap.dedent("""
        a = Log.options(**on(HEAD)).remote()
        out(got=ray.get(a.add.remote(5), timeout=20))
    """),
        driver_env(c.head),
    )
    assert r.returncode == 0 and json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0]) == {"got": 5}, r.stderr
