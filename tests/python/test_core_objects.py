# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of objects against a real beamd: put/get, get/wait
argument rules and timeouts, remote exceptions, ObjectRef identity, object
lifetimes in the daemon, and refs and handles passed to actors."""

import gc
import os
import re
import time

import pytest

from beamkit.procs import wait_until


class Point:
    """A plain user object (pickled by reference to this module)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


def _slow_class(ray):
    @ray.remote
    class Slow:
        def sleep(self, t):
            time.sleep(t)
            return t

        def echo(self, x):
            return x

    return Slow


def _flush(ray):
    ray._private.worker.runtime().client.flush()


# -- put / get ------------------------------------------------------------------


@pytest.mark.ray_compat
def test_put_get_round_trips(ray_start):
    ray = ray_start
    values = [
        b"bytes\x00\xff",
        {"a": [1, 2.5, None], "b": {"c": (1, 2)}},
        Point(3, 4),
        "text",
        12345678901234567890,
        None,
        [b"x" * 1000] * 3,
        lambda x: x + 1,
    ]
    refs = [ray.put(v) for v in values]
    got = ray.get(refs)
    assert got[:-1] == values[:-1]
    assert got[-1](41) == 42
    for v, r in zip(values[:-1], refs):
        assert ray.get(r) == v


def test_put_get_large(ray_start, beamd):
    ray = ray_start
    big = os.urandom(1024) * (20 * 1024)  # 20 MiB
    ref = ray.put(big)
    assert ray.get(ref) == big
    # and through an actor, both ways
    s = _slow_class(ray).remote()
    echoed = s.echo.remote(big)  # held: a large value's release is sent at once
    assert ray.get(echoed) == big
    assert beamd.status()["objects"]["bytes"] >= 2 * len(big)


@pytest.mark.ray_compat
def test_get_list_keeps_order_and_duplicates(ray_start):
    ray = ray_start
    a, b, c = ray.put("a"), ray.put("b"), ray.put("c")
    assert ray.get([c, a, b, a, c, c]) == ["c", "a", "b", "a", "c", "c"]
    assert ray.get([]) == []
    s = _slow_class(ray).remote()
    slow, fast = s.sleep.remote(0.2), ray.put("fast")
    assert ray.get([slow, fast, slow]) == [0.2, "fast", 0.2]


@pytest.mark.ray_compat
def test_get_argument_errors(ray_start):
    ray = ray_start
    with pytest.raises(ValueError):
        ray.get("x")
    with pytest.raises(ValueError):
        ray.get((ray.put(1),))
    with pytest.raises(TypeError):
        ray.get([1])
    with pytest.raises(TypeError):
        ray.get([ray.put(1), "y"])


@pytest.mark.ray_compat
def test_put_refuses_object_ref(ray_start):
    ray = ray_start
    ref = ray.put(1)
    with pytest.raises(TypeError):
        ray.put(ref)
    # wrapped in a list it is fine, and comes back as the same ref
    outer = ray.put([ref])
    (inner,) = ray.get(outer)
    assert inner == ref
    assert ray.get(inner) == 1


@pytest.mark.ray_compat
def test_put_unserializable_raises_type_error(ray_start):
    import threading

    ray = ray_start
    with pytest.raises(TypeError):
        ray.put(threading.Lock())


@pytest.mark.ray_compat
def test_get_timeout(ray_start):
    ray = ray_start
    s = _slow_class(ray).remote()
    assert ray.get(s.echo.remote(1)) == 1  # the worker is up
    ref = s.sleep.remote(1)
    t0 = time.monotonic()
    with pytest.raises(ray.exceptions.GetTimeoutError) as e:
        ray.get(ref, timeout=0.2)
    elapsed = time.monotonic() - t0
    assert 0.15 <= elapsed < 1.5
    assert isinstance(e.value, TimeoutError)
    assert isinstance(e.value, ray.exceptions.RayError)
    with pytest.raises(TimeoutError):
        ray.get([ray.put(1), ref], timeout=0)
    assert ray.get(ref, timeout=5) == 1


@pytest.mark.ray_compat
def test_get_timeout_zero_on_ready(ray_start):
    ray = ray_start
    r = ray.put("ready")
    assert ray.get(r, timeout=0) == "ready"


# -- wait -----------------------------------------------------------------------


@pytest.mark.ray_compat
def test_wait_argument_errors(ray_start):
    ray = ray_start
    r1, r2 = ray.put(1), ray.put(2)
    with pytest.raises(ValueError):
        ray.wait([r1, r1])
    with pytest.raises(ValueError):
        ray.wait([r1, r2], num_returns=3)
    with pytest.raises(TypeError):
        ray.wait(r1)
    with pytest.raises(TypeError):
        ray.wait([r1, 5])
    with pytest.raises(ValueError):
        ray.wait([r1], timeout=-1)
    with pytest.raises(ValueError):
        ray.wait([r1], num_returns=0)
    assert ray.wait([]) == ([], [])


@pytest.mark.ray_compat
def test_wait_timeout_zero_polls(ray_start):
    ray = ray_start
    s = _slow_class(ray).remote()
    slow = s.sleep.remote(2)
    done = ray.put("done")
    t0 = time.monotonic()
    ready, rest = ray.wait([slow, done], num_returns=2, timeout=0)
    assert time.monotonic() - t0 < 0.5
    assert ready == [done] and rest == [slow]
    ready, rest = ray.wait([slow], timeout=0)
    assert ready == [] and rest == [slow]
    ray.kill(s)


def test_wait_keeps_input_order_and_caps_at_num_returns(ray_start):
    ray = ray_start
    refs = [ray.put(i) for i in range(6)]
    ready, rest = ray.wait(refs[::-1], num_returns=3, timeout=5)
    assert ready == refs[::-1][:3]
    assert rest == refs[::-1][3:]
    ready, rest = ray.wait(refs, num_returns=6)
    assert ready == refs and rest == []


@pytest.mark.ray_compat
def test_wait_returns_as_soon_as_enough_are_ready(ray_start):
    ray = ray_start
    Slow = _slow_class(ray)
    a, b = Slow.remote(), Slow.remote()
    ray.get([a.echo.remote(0), b.echo.remote(0)])
    refs = [a.sleep.remote(3), b.sleep.remote(0.1)]
    t0 = time.monotonic()
    ready, rest = ray.wait(refs, num_returns=1, timeout=5)
    assert time.monotonic() - t0 < 2
    assert ready == [refs[1]] and rest == [refs[0]]
    ray.kill(a)


def test_wait_counts_errors_as_ready(ray_start):
    ray = ray_start

    @ray.remote
    class Fails:
        def fail(self):
            raise ValueError("x")

    fails = Fails.remote()  # (a method holds its handle weakly, as Ray's)
    ref = fails.fail.remote()
    ready, rest = ray.wait([ref], timeout=5)
    assert ready == [ref]
    with pytest.raises(ValueError):
        ray.get(ref)


# -- remote exceptions ----------------------------------------------------------------


def test_method_exception(ray_start):
    ray = ray_start

    @ray.remote
    class Raises:
        def bad(self, x):
            return self._inner(x)

        def _inner(self, x):
            raise ValueError(f"bad value {x}")

        def ok(self):
            return "still alive"

    r = Raises.remote()
    with pytest.raises(ValueError) as e:
        ray.get(r.bad.remote(7))
    err = e.value
    assert isinstance(err, ray.exceptions.RayTaskError)
    assert isinstance(err, ValueError)
    assert type(err).__name__ == "RayTaskError(ValueError)"
    assert isinstance(err.cause, ValueError)
    assert err.cause.args == ("bad value 7",)
    text = str(err)
    lines = text.splitlines()
    # Ray's form: a header naming the call, then the remote frames
    assert re.match(r"ray::Raises\.bad\(\) \(pid=\d+, ip=127\.0\.0\.1, actor_id=[0-9a-f]{32}, repr=", lines[0])
    assert lines[1].startswith("  File ") and lines[1].endswith(", in bad")
    assert any(line.endswith(", in _inner") for line in lines)
    assert lines[-1] == "ValueError: bad value 7"
    assert "_worker.py" not in text
    assert "Traceback (most recent call last):" in err.traceback_str
    assert ray.get(r.ok.remote()) == "still alive"
    # in a list, the first error is raised
    with pytest.raises(ValueError, match="bad value 8"):
        ray.get([r.ok.remote(), r.bad.remote(8)])


def test_custom_exception_class(ray_start):
    ray = ray_start

    @ray.remote
    class Raises:
        def bad(self):
            raise KeyError("missing-key")

    raises = Raises.remote()
    with pytest.raises(KeyError) as e:
        ray.get(raises.bad.remote())
    assert isinstance(e.value, ray.exceptions.RayTaskError)
    assert "missing-key" in str(e.value)


def test_unknown_method_name_raises_attribute_error(ray_start):
    ray = ray_start
    from ray.actor import ActorMethod

    s = _slow_class(ray).remote()
    with pytest.raises(AttributeError):
        ray.get(ActorMethod(s, "nope").remote())
    assert ray.get(s.echo.remote(3)) == 3


# -- ObjectRef identity --------------------------------------------------------------


def test_object_ref_identity(ray_start):
    ray = ray_start
    r = ray.put(1)
    same = ray.ObjectRef(r.binary())
    other = ray.put(1)
    assert r == same and hash(r) == hash(same)
    assert r != other
    assert len({r, same, other}) == 2
    assert re.fullmatch(r"[0-9a-f]{56}", r.hex())
    assert len(r.binary()) == 28
    assert repr(r) == f"ObjectRef({r.hex()})"
    d = {r: "v"}
    assert d[same] == "v"
    s = _slow_class(ray).remote()
    c = s.echo.remote(1)
    assert re.fullmatch(r"[0-9a-f]{56}", c.hex()) and c != r
    assert isinstance(c, ray.ObjectRef)
    from ray.types import ObjectRef as TypesObjectRef

    assert isinstance(c, TypesObjectRef)


@pytest.mark.ray_compat
def test_object_ref_future(ray_start):
    import asyncio

    ray = ray_start
    s = _slow_class(ray).remote()
    assert s.sleep.remote(0.05).future().result(timeout=5) == 0.05

    async def main():
        return await s.echo.remote("awaited"), await asyncio.gather(s.echo.remote(1), s.echo.remote(2))

    assert asyncio.run(main()) == ("awaited", [1, 2])


# -- lifetimes in the daemon ---------------------------------------------------------


def test_object_count_drops_when_refs_die(ray_start, beamd):
    ray = ray_start
    _flush(ray)
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 0, 5)
    refs = [ray.put(i) for i in range(50)]
    _flush(ray)
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 50, 5)
    keep = refs[7]
    del refs
    gc.collect()
    _flush(ray)
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 1, 5)
    assert ray.get(keep) == 7
    del keep
    gc.collect()
    _flush(ray)
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 0, 5)
    assert beamd.status()["objects"]["bytes"] == 0


def test_call_results_released(ray_start, beamd):
    ray = ray_start
    s = _slow_class(ray).remote()
    refs = [s.echo.remote(b"x" * 1000) for _ in range(20)]
    assert len(ray.get(refs)) == 20
    assert beamd.status()["objects"]["count"] >= 20
    del refs
    gc.collect()
    _flush(ray)
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 0, 5)


def test_ref_unpickled_from_value_survives_outer_release(ray_start, beamd):
    """A ref carried inside a put value keeps its object alive in the
    process that got it, after the carrying object and the original ref die."""
    ray = ray_start
    inner = ray.put("inner-value")
    inner_hex = inner.hex()
    outer = ray.put({"ref": inner})
    del inner
    gc.collect()
    _flush(ray)
    got = ray.get(outer)["ref"]
    del outer
    gc.collect()
    _flush(ray)
    time.sleep(0.1)
    assert got.hex() == inner_hex
    assert ray.get(got, timeout=5) == "inner-value"


@pytest.mark.ray_compat
def test_actor_result_holding_ref_keeps_it(ray_start):
    """A ref that an actor put and returned stays good after the actor's
    call ends (it travelled inside the result)."""
    ray = ray_start

    @ray.remote
    class Maker:
        def make(self):
            return [ray.put("made-in-actor")]

    m = Maker.remote()
    (ref,) = ray.get(m.make.remote())
    gc.collect()
    time.sleep(0.1)
    assert ray.get(ref, timeout=5) == "made-in-actor"


# -- refs and handles as arguments ---------------------------------------------------


@pytest.mark.ray_compat
def test_ref_args(ray_start):
    ray = ray_start

    @ray.remote
    class Reader:
        def top(self, x, *, kw=None):
            return x, kw

        def nested(self, lst):
            assert isinstance(lst[0], ray.ObjectRef)
            return ray.get(lst[0]), ray.get(lst)

    r = Reader.remote()
    v = ray.put({"k": 1})
    assert ray.get(r.top.remote(v, kw=v)) == ({"k": 1}, {"k": 1})
    assert ray.get(r.nested.remote([v, ray.put(2)])) == ({"k": 1}, [{"k": 1}, 2])
    # a call's result as another call's argument
    s = _slow_class(ray).remote()
    slow = s.sleep.remote(0.1)
    assert ray.get(r.top.remote(slow)) == (0.1, None)

    # as a constructor argument
    @ray.remote
    class Init:
        def __init__(self, x, lst):
            self.x, self.inner = x, ray.get(lst[0])

        def get(self):
            return self.x, self.inner

    init = Init.remote(v, [ray.put("in-list")])
    assert ray.get(init.get.remote()) == ({"k": 1}, "in-list")


def test_ref_arg_dropped_by_driver_stays_until_call_runs(ray_start):
    ray = ray_start
    s = _slow_class(ray).remote()
    blocker = s.sleep.remote(0.3)
    ref = ray.put("pinned-by-call")
    result = s.echo.remote([ref])
    del ref
    gc.collect()
    _flush(ray)
    (inner,) = ray.get(result, timeout=5)
    assert ray.get(inner, timeout=5) == "pinned-by-call"
    assert ray.get(blocker) == 0.3


@pytest.mark.ray_compat
def test_actor_handle_passed_to_actor(ray_start):
    ray = ray_start

    @ray.remote
    class Target:
        def __init__(self):
            self.calls = 0

        def hit(self, who):
            self.calls += 1
            return f"hit by {who} #{self.calls}"

    @ray.remote
    class Caller:
        def __init__(self, target=None):
            self.target = target

        def call(self, handle):
            return ray.get(handle.hit.remote("caller"))

        def call_stored(self):
            return ray.get(self.target.hit.remote("stored"))

        def call_in_list(self, handles):
            return [ray.get(h.hit.remote("list")) for h in handles]

    t = Target.remote()
    c = Caller.remote(t)
    assert ray.get(c.call.remote(t)) == "hit by caller #1"
    assert ray.get(c.call_stored.remote()) == "hit by stored #2"
    assert ray.get(c.call_in_list.remote([t])) == ["hit by list #3"]
    assert ray.get(t.hit.remote("driver")) == "hit by driver #4"


def test_actor_handle_identity_and_pickle(ray_start):
    import cloudpickle

    ray = ray_start
    s = _slow_class(ray).remote()
    s2 = cloudpickle.loads(cloudpickle.dumps(s))
    assert s2 == s and hash(s2) == hash(s)
    assert ray.get(s2.echo.remote("via copy")) == "via copy"
    assert re.fullmatch(r"[0-9a-f]{32}", s._actor_id.hex())
    assert isinstance(s, ray.actor.ActorHandle)


@pytest.mark.ray_compat
def test_handle_to_self_from_current_actor(ray_start):
    ray = ray_start

    @ray.remote
    class Self:
        def me(self):
            return ray.get_runtime_context().current_actor

        def ping(self):
            return "self-pong"

    a = Self.remote()
    me = ray.get(a.me.remote())
    assert me == a
    assert ray.get(me.ping.remote()) == "self-pong"


def test_dropped_objects_freed_while_driver_idles(ray_start, beamd):
    ray = ray_start
    refs = [ray.put(b"x" * 1000) for _ in range(10)]
    _flush(ray)
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 10, 5)
    del refs
    gc.collect()
    # no flush, no further request from this process
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 0, 1)


def test_ref_args_released_after_the_call(ray_start, beamd):
    """The worker's borrowed refs to its arguments are released when the
    call ends, even when the worker then sits idle."""
    ray = ray_start
    s = _slow_class(ray).remote()
    r = ray.put("arg")
    assert ray.get(s.echo.remote(r)) == "arg"  # top level: the worker borrowed it
    assert ray.get(s.echo.remote([r]))[0] == r  # nested: it travelled back in the result
    del r
    gc.collect()
    _flush(ray)
    assert wait_until(lambda: beamd.status()["objects"]["count"] == 0, 5)


def test_result_too_large_for_a_frame_fails_the_call_not_the_actor(ray_start):
    """Inline (shared memory off in the worker, as on a member node)."""
    ray = ray_start

    @ray.remote
    class Big:
        def big(self):
            ray._private.worker.runtime().shm = False
            return b"x" * (256 * 1024 * 1024 + 1)

        def ping(self):
            return "pong"

    b = Big.remote()
    with pytest.raises(ray.exceptions.RayTaskError, match="frame limit"):
        ray.get(b.big.remote(), timeout=30)
    assert ray.get(b.ping.remote(), timeout=5) == "pong"


def test_put_too_large_for_a_frame_raises_and_keeps_the_connection(ray_start):
    """Inline (shared memory off, as on a member node)."""
    ray = ray_start
    s = _slow_class(ray).remote()
    ray._private.worker.runtime().shm = False
    with pytest.raises(ValueError, match="frame limit"):
        ray.put(b"x" * (256 * 1024 * 1024 + 1))
    assert ray.get(s.echo.remote("still connected"), timeout=5) == "still connected"


def test_get_values_larger_than_one_reply_together(ray_start):
    """Each value fits in a frame, all of them together do not: ray.get
    still returns them all, in order, duplicates included."""
    ray = ray_start
    size = 130 * 1024 * 1024
    a, b = ray.put(b"a" * size), ray.put(b"b" * size)
    got = ray.get([a, b, a], timeout=30)
    assert [len(x) for x in got] == [size, size, size]
    assert [x[:1] for x in got] == [b"a", b"b", b"a"]
    assert got[0] is got[2]


@pytest.mark.ray_compat
def test_unpicklable_result_is_a_task_error(ray_start):
    import threading

    ray = ray_start

    @ray.remote
    class Bad:
        def lock(self):
            return threading.Lock()

        def ping(self):
            return "pong"

    b = Bad.remote()
    with pytest.raises(TypeError, match="pickle") as e:
        ray.get(b.lock.remote(), timeout=5)
    assert isinstance(e.value, ray.exceptions.RayTaskError)
    assert ray.get(b.ping.remote(), timeout=5) == "pong"


def test_task_error_text_has_no_orphan_caret_lines(ray_start):
    import threading

    ray = ray_start

    @ray.remote
    class Bad:
        def lock(self):
            return threading.Lock()

    bad = Bad.remote()
    with pytest.raises(TypeError) as e:
        ray.get(bad.lock.remote(), timeout=5)
    lines = str(e.value).splitlines()
    for prev, line in zip(lines, lines[1:]):
        if line.strip() and set(line.strip()) <= {"^", "~"}:
            assert prev.startswith("    "), f"caret line under {prev!r}"


def test_handle_and_ref_passed_to_another_driver_through_a_file(ray_start, tmp_path):
    import cloudpickle

    from beamkit.daemon import run_driver

    ray = ray_start

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

    c = Counter.remote()
    assert ray.get(c.add.remote(1)) == 1
    ref = ray.put({"shared": "value"})
    path = tmp_path / "handles.pkl"
    path.write_bytes(cloudpickle.dumps((c, ref)))
    out = run_driver(f"""
import cloudpickle, ray
ray.init()
c, ref = cloudpickle.loads(open({str(path)!r}, "rb").read())
print("ADD", ray.get(c.add.remote(10)))
print("REF", ray.get(ref, timeout=5))
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ADD 11", "REF {'shared': 'value'}"]
    assert ray.get(c.add.remote(100)) == 111
    assert ray.get(ref) == {"shared": "value"}


@pytest.mark.ray_compat
def test_wait_fetch_local_false_accepted(ray_start):
    ray = ray_start
    r = ray.put(1)
    assert ray.wait([r], fetch_local=False, timeout=1) == ([r], [])
