# SPDX-License-Identifier: Apache-2.0
"""Results pushed to their caller (submit's `push`, docs/PROTOCOL.md): beamd
sends a call's result to the client that submitted it as soon as it is
ready, however the call ends, and _beam keeps it in a table by object id
until the ref is released, so ray.get of it needs no round trip.

What is checked: the push is really taken (beamd's `gets` counter does not
move, the raw protocol shows the `result` push); a pushed entry is the
entry a get returns (the fast path equals the slow one); repeated gets;
deaths mid-call, kill, task errors; a result over the push bound (fetched
by a get); lists mixing pushed and other refs, with timeouts and an error
first; refs released before their result (nothing left in the table);
refs passed to another actor; deeper pipelines than the pushed bound; a
driver on a member node (its local calls pushed by the member, the rest
by the head over the link). Beam internals: not run against real Ray.

Every call here goes through beamd (direct calls off, in this driver and
in the drivers it starts): this file is about beamd's push and _beam's
table of pushed results, which a direct call skips; the direct path's
counterparts of its counters are in test_direct_calls.py."""

import gc
import json
import os
import textwrap
import time

import cloudpickle
import pytest

import ray
from beamkit.client import Conn, Ids, object_id
from beamkit.daemon import driver_env, run_driver
from beamkit.procs import wait_until
from ray._private import direct

PUSH_MAX_DATA = 64 << 10  # BEAM_PUSH_MAX_DATA (include/beam/protocol.h)
MAX_PENDING = 16  # PB_PUSH_MAX_PENDING (src/pybeam/pushed.h)


@ray.remote
class A:
    def f(self, x):
        return x

    def big(self, n):
        return b"x" * n

    def boom(self):
        raise ValueError("boom")

    def sleep(self, s, v=None):
        time.sleep(s)
        return v

    def die(self):
        os._exit(1)

    def boom_later(self, s):
        time.sleep(s)
        raise ValueError("later")

    def get_of(self, refs):
        return ray.get(refs[0]) + 1

    def pid(self):
        return os.getpid()


@pytest.fixture(autouse=True)
def through_beamd(monkeypatch):
    monkeypatch.setattr(direct, "ON", False)
    monkeypatch.setenv("BEAM_DIRECT_CALLS", "0")


def client():
    return ray._private.worker.runtime().client


def stats():
    """(entries in the pushed-results table, result pushes filed ever)."""
    return client().result_stats()


def settle():
    """Refs dropped here reach _beam's release (and its table) now."""
    gc.collect()
    client().flush()


def test_sync_calls_are_pushed_without_a_get(ray_start, beamd):
    a = A.remote()
    assert ray.get(a.f.remote(0)) == 0
    before, filed = beamd.status(), stats()[1]
    for i in range(30):
        assert ray.get(a.f.remote(i)) == i
    after = beamd.status()
    assert after["gets"] == before["gets"]  # not one get reached beamd
    assert after["results_pushed"] - before["results_pushed"] >= 30
    assert stats()[1] - filed == 30


def test_raw_client_sees_the_push(ray_start, beamd):
    a = A.remote()
    ray.get(a.f.remote(0))
    conn = Conn(beamd.socket)
    ids = Ids(conn.hello())

    def submit(method, args, push):
        obj = object_id(ids.node, ids.conn, ids._next(), ids.job, kind=0)
        conn.send(
            [
                0,
                0,
                "submit",
                {
                    "actor": a._ray_actor_id_bytes,
                    "obj": obj,
                    "method": method,
                    "args": cloudpickle.dumps((args, {})),
                    "push": push,
                },
            ]
        )
        return obj

    def next_push():
        while True:
            m = conn.recv()
            if m[0] == 2 and m[1] == "result":
                return m[2]

    obj = submit("f", (7,), True)
    p = next_push()
    assert p["obj"] == obj and p["status"] == 0 and cloudpickle.loads(p["data"]) == 7
    # without push nothing comes: the next push is the next pushed call's
    silent = submit("f", (8,), False)
    obj = submit("f", (9,), True)
    p = next_push()
    assert p["obj"] == obj and cloudpickle.loads(p["data"]) == 9
    assert conn.call("get", {"objs": [silent], "timeout_ms": 5000})["values"][0][0] == 0
    # over the bound: pushed without its value, which a get then fetches
    obj = submit("big", (PUSH_MAX_DATA + 1,), True)
    p = next_push()
    assert p == {"obj": obj}
    value = conn.call("get", {"objs": [obj], "timeout_ms": 5000})["values"][0]
    assert value[0] == 0 and cloudpickle.loads(value[1]) == b"x" * (PUSH_MAX_DATA + 1)
    # an actor beamd does not know: the failure is pushed at once
    obj = object_id(ids.node, ids.conn, ids._next(), ids.job, kind=0)
    conn.send(
        [
            0,
            0,
            "submit",
            {"actor": b"\x00" * 16, "obj": obj, "method": "f", "args": cloudpickle.dumps(((1,), {})), "push": True},
        ]
    )
    p = next_push()
    assert p["obj"] == obj and p["status"] == 2 and b"no such actor" in p["data"]
    # push must be a bool
    r = conn.request(
        "submit", {"actor": a._ray_actor_id_bytes, "obj": ids.obj(), "method": "f", "args": b"", "push": 1}
    )
    assert r[2]["code"] == "bad_request" and "push" in r[2]["message"]
    conn.close()


def test_a_refused_submit_still_gets_its_pushed_result(ray_start, beamd):
    """A submit with push whose object id is already in use is refused (an
    `error` push): its `result` must come too, as an error, or its waiter
    waits forever. Raw (it comes before the reply to the next request), and
    through _beam (wait_result answers instead of timing out). The object
    in use keeps its value and the actor never runs the call."""
    a = A.remote()
    ray.get(a.f.remote(0))
    conn = Conn(beamd.socket)
    ids = Ids(conn.hello())
    obj = ids.obj()
    conn.call("put", {"obj": obj, "data": b"v"})
    for actor in (a._ray_actor_id_bytes, b"\x00" * 16):
        conn.send(
            [
                0,
                0,
                "submit",
                {"actor": actor, "obj": obj, "method": "die", "args": cloudpickle.dumps(((), {})), "push": True},
            ]
        )
        conn.send([0, 99, "status", {}])
        msgs = []
        while (m := conn.recv())[:2] != [1, 99]:
            msgs.append(m)
        results = [m[2] for m in msgs if m[:2] == [2, "result"]]
        errors = [m[2]["message"] for m in msgs if m[:2] == [2, "error"]]
        assert len(results) == 1 and results[0]["obj"] == obj and results[0]["status"] == 3, msgs
        assert b"already in use" in results[0]["data"] and any("already in use" in e for e in errors), msgs
    assert conn.call("get", {"objs": [obj], "timeout_ms": 5000})["values"][0] == [0, b"v"]
    conn.close()
    # through _beam: the id of this driver's own put, submitted again
    ref = ray.put("kept")
    client().submit(
        {
            "actor": a._ray_actor_id_bytes,
            "obj": ref.binary(),
            "method": "f",
            "args": cloudpickle.dumps((("other",), {})),
        }
    )
    status, data = client().wait_result(ref.binary(), 10)
    assert status == 3 and b"already in use" in bytes(data)
    assert ray.get(a.pid.remote(), timeout=10) > 0  # (the actor did not run "die")


def test_an_object_id_another_client_made_is_refused(beamd):
    """A new object's id must be the client's own (its first 8 bytes: the
    node index and connection its hello gave). Another's next id, put or
    submitted by this client, made that object, and the other client's own
    put of it then failed `exists`. Now both are refused, the submit with
    push gets its error result, and the owner's put goes through."""
    with Conn(beamd.socket) as a, Conn(beamd.socket) as b:
        theirs = Ids(a.hello()).obj()
        b.hello()
        r = b.request("put", {"obj": theirs, "data": b"b"})
        assert r[2] is not None and r[2]["code"] == "bad_request" and "'obj'" in r[2]["message"], r
        b.send([0, 0, "submit", {"actor": b"\x00" * 16, "obj": theirs, "method": "f", "args": b"", "push": True}])
        m = b.recv()
        while m[:2] != [2, "result"]:
            m = b.recv()
        assert m[2]["obj"] == theirs and m[2]["status"] == 3 and b"not made by this client" in m[2]["data"], m
        assert a.call("put", {"obj": theirs, "data": b"a"}) == {}
        assert b.call("get", {"objs": [theirs], "timeout_ms": 0})["values"][0] == [0, b"a"]


def test_pushed_entry_equals_a_gets_entry(ray_start):
    """The table's (status, data) is what a get of the same id returns, for
    a small value, one long enough to be a memoryview, a task error and a
    death."""
    a = A.remote()
    b = A.remote()
    refs = [a.f.remote(5), a.f.remote("y" * 5000), a.boom.remote(), b.sleep.remote(30)]
    ray.get(b.pid.remote())
    time.sleep(0.2)
    ray.kill(b)
    c = client()
    for ref in refs:
        pushed = c.wait_result(ref._id, 20)
        assert type(pushed) is tuple, pushed
        got = c.request("get", {"objs": [ref._id], "timeout_ms": 20000})["values"][0]
        assert pushed[0] == got[0]
        assert bytes(pushed[1]) == bytes(got[1])
        # repeated: the same entry again
        assert c.wait_result(ref._id, 0) == pushed


def test_repeated_get_and_release_leaves_nothing(ray_start):
    a = A.remote()
    ray.get(a.f.remote(0))
    settle()
    base = stats()[0]
    r = a.f.remote([1, 2])
    assert ray.get(r) == [1, 2]
    assert ray.get(r) == [1, 2]
    assert ray.get([r, r]) == [[1, 2], [1, 2]]
    assert ray.get(r, timeout=0) == [1, 2]
    assert stats()[0] == base + 1
    del r
    settle()
    assert stats()[0] == base


def test_released_before_its_result_leaves_nothing(ray_start, beamd):
    a = A.remote()
    ray.get(a.f.remote(0))
    settle()
    base = stats()[0]
    objects = beamd.status()["objects"]["count"]
    refs = [a.sleep.remote(0.05, i) for i in range(10)]
    del refs
    settle()
    assert stats()[0] == base
    # the actor runs in order: once this is back, the ten pushes came (and
    # were dropped: their ids were no longer expected)
    assert ray.get(a.f.remote(1)) == 1
    settle()
    assert stats()[0] == base
    assert wait_until(lambda: beamd.status()["objects"]["count"] <= objects, 10)


def test_task_error_and_repeated_get(ray_start):
    a = A.remote()
    r = a.boom.remote()
    for _ in range(2):
        with pytest.raises(ray.exceptions.RayTaskError) as e:
            ray.get(r)
        assert isinstance(e.value, ValueError) and "boom" in str(e.value)


def test_actor_death_mid_call(ray_start):
    a = A.remote()
    ray.get(a.f.remote(0))
    r = a.die.remote()
    for _ in range(2):
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(r, timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(a.f.remote(1), timeout=30)


def test_kill_mid_call(ray_start):
    a = A.remote()
    ray.get(a.f.remote(0))
    pending = [a.sleep.remote(30, i) for i in range(3)]
    time.sleep(0.2)
    ray.kill(a)
    for r in pending:
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(r, timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(pending, timeout=30)


def test_large_result_is_fetched_by_a_get(ray_start, beamd):
    a = A.remote()
    ray.get(a.f.remote(0))
    gets = beamd.status()["gets"]
    r = a.big.remote(PUSH_MAX_DATA + 10)
    assert ray.get(r) == b"x" * (PUSH_MAX_DATA + 10)
    assert beamd.status()["gets"] == gets + 1
    small = a.big.remote(PUSH_MAX_DATA // 2)
    assert ray.get([small, r]) == [b"x" * (PUSH_MAX_DATA // 2), b"x" * (PUSH_MAX_DATA + 10)]


def test_mixed_lists_timeouts_and_error_first(ray_start):
    a = A.remote()
    b = A.remote()
    put = ray.put("p")
    assert ray.get([a.f.remote(1), put, a.f.remote(2)]) == [1, "p", 2]
    slow = b.sleep.remote(30, "late")
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get([a.f.remote(3), put, slow], timeout=0.5)
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get([a.f.remote(3), slow], timeout=0.5)  # all pushed: waited for in the table
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(slow, timeout=0)
    # an error ends the get without waiting for the slow one (else: timeout)
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get([slow, a.boom.remote()], timeout=20)
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get([slow, put, a.boom.remote()], timeout=20)
    ray.kill(b)


def test_mixed_list_ends_at_a_pushed_error(ray_start):
    """A list with a ref beamd must be asked for (not expected here) and a
    pushed one: the pushed one's error ends the get while beamd's get of
    the other still waits (else: GetTimeoutError after 20 s)."""
    a = A.remote()
    b = A.remote()
    ray.get([a.f.remote(0), b.f.remote(0)])
    settle()
    err = a.boom_later.remote(0.5)
    fill = [b.sleep.remote(30) for _ in range(MAX_PENDING)]
    c = client()
    assert c.wait_result(err._id, 0) is None  # expected, not come
    assert c.wait_result(fill[-1]._id, 0) is False  # past the bound: beamd's to answer
    with pytest.raises(ray.exceptions.RayTaskError) as e:
        ray.get([fill[-1], err], timeout=20)
    assert "later" in str(e.value)
    ray.kill(b)


def test_deeper_pipelines_than_the_pushed_bound(ray_start):
    a = A.remote()
    ray.get(a.f.remote(0))
    settle()
    base = stats()[0]
    n = 4 * MAX_PENDING
    # the first call holds the others back: all are pending while submitted
    refs = [a.sleep.remote(1.0 if i == 0 else 0, i) for i in range(n)]
    assert 0 < stats()[0] - base <= MAX_PENDING  # the rest were submitted without push
    assert ray.get(refs) == list(range(n))
    assert [ray.get(r) for r in refs] == list(range(n))


def test_refs_passed_to_another_actor(ray_start):
    a = A.remote()
    b = A.remote()
    r = a.f.remote(41)
    assert ray.get(b.get_of.remote([r])) == 42
    assert ray.get(r) == 41
    # and a call made inside an actor is pushed to that actor's worker
    assert ray.get(b.get_of.remote([a.f.remote(1)])) == 2


def test_threads_wait_for_one_pushed_result(ray_start):
    import threading

    a = A.remote()
    r = a.sleep.remote(0.3, "v")
    got = []
    ts = [threading.Thread(target=lambda: got.append(ray.get(r, timeout=30))) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == ["v"] * 4


def test_relayed_driver_on_a_member(cluster):
    """A driver on the member: calls to an actor there stay on the member
    (its results pushed by the member), calls to an actor on the head are
    pushed by the head over the link; a kill mid-call is answered by the
    head as before."""
    code = textwrap.dedent("""
        import gc, json, sys, time
        import ray
        ray.init()

        @ray.remote(num_cpus=0)
        class A:
            def f(self, x):
                return x

            def sleep(self, s):
                time.sleep(s)

        local = A.options(resources={"node:127.0.0.2": 0.001}).remote()
        head = A.options(resources={"node:127.0.0.1": 0.001}).remote()
        ray.get([local.f.remote(0), head.f.remote(0)], timeout=30)
        c = ray._private.worker.runtime().client
        filed = c.result_stats()[1]
        got = [ray.get(local.f.remote(i)) for i in range(20)] + [ray.get(head.f.remote(i)) for i in range(20)]
        pushed = c.result_stats()[1] - filed
        pending = [local.sleep.remote(30) for _ in range(3)]
        time.sleep(0.3)
        ray.kill(local)
        died = 0
        for r in pending:
            try:
                ray.get(r, timeout=30)
            except ray.exceptions.ActorDiedError:
                died += 1
        del pending, r
        gc.collect()
        c.flush()
        sys.stdout.write("RESULT " + json.dumps({"got": got, "pushed": pushed, "died": died,
                                                 "left": c.result_stats()[0]}) + "\\n")
        sys.stdout.flush()
    """)
    local_before = cluster.head.status()["local_calls"]
    r = run_driver(code, driver_env(cluster.members[0]), timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr + cluster.logs()
    out = json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert out["got"] == list(range(20)) * 2
    assert out["pushed"] == 40
    assert out["died"] == 3
    assert out["left"] == 0
    assert cluster.head.status()["local_calls"] - local_before >= 20


def test_timeout_zero_on_a_result_that_came(ray_start):
    """get(timeout=0) of a call whose result is ready returns it, as a get
    of a ready object does, even before anyone has read its push."""
    a = A.remote()
    ray.get(a.f.remote(0))
    refs = [a.f.remote(i) for i in range(5)]
    ray.get(a.f.remote("last"))  # the actor runs in order: the five are done
    assert [ray.get(r, timeout=0) for r in refs] == list(range(5))
    r = a.f.remote(9)
    ray.wait([r], timeout=30)  # ready in beamd; its push may still be unread here
    assert ray.get(r, timeout=0) == 9
