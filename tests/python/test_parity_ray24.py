# SPDX-License-Identifier: Apache-2.0
"""Ray parity, issue 24: the gaps Ray's own unit tests found, each checked
against real Ray 2.43 too (every test here is ray_compat). Handles got by
name and actor methods are weak; a method handle passed into a task works;
decorator misuse; ray.wait's timeout; the runtime context; exceptions and
their text; placement group edges; logging from workers."""

import os

import pytest

from beamkit.procs import wait_gone

pytestmark = pytest.mark.ray_compat


# -- weak handles -----------------------------------------------------------------


def _pid_actor(ray):
    @ray.remote(num_cpus=0)
    class Pid:
        def pid(self):
            return os.getpid()

        def look_at_itself(self):
            handle = ray.get_runtime_context().current_actor
            return type(handle).__name__

    return Pid


def test_handles_got_by_name_keep_no_actor_alive(ray_start):
    ray = ray_start
    Pid = _pid_actor(ray)
    # lookups whose handles are dropped: the actor dies with its creator's handle
    a = Pid.options(name="weak-loop").remote()
    pid = ray.get(a.pid.remote(), timeout=60)
    for _ in range(5):
        h = ray.get_actor("weak-loop")
        assert ray.get(h.pid.remote(), timeout=60) == pid
        del h
    del a
    assert wait_gone(pid, 30)
    # a handle got by name still held: it does not keep the actor alive either
    a = Pid.options(name="weak-held").remote()
    pid = ray.get(a.pid.remote(), timeout=60)
    h = ray.get_actor("weak-held")
    del a
    assert wait_gone(pid, 30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(h.pid.remote(), timeout=60)
    # the actor's handle to itself holds nothing
    a = Pid.remote()
    pid = ray.get(a.pid.remote(), timeout=60)
    assert ray.get([a.look_at_itself.remote() for _ in range(3)], timeout=60) == ["ActorHandle"] * 3
    del a
    assert wait_gone(pid, 30)


def test_an_actor_method_holds_its_handle_weakly(ray_start):
    ray = ray_start
    Pid = _pid_actor(ray)
    a = Pid.remote()
    pid = ray.get(a.pid.remote(), timeout=60)
    method = a.pid
    del a
    assert wait_gone(pid, 30)
    with pytest.raises(RuntimeError, match="Lost reference to actor"):
        method.remote()
    # a temporary handle is gone before its method is called
    with pytest.raises(RuntimeError, match="Lost reference to actor"):
        Pid.remote().pid.remote()


# -- method handles into tasks, argument counts, decorators ------------------------------


class _Local:
    def method(self, x):
        return x + 10


def test_an_actor_method_passed_into_a_task_runs(ray_start):
    ray = ray_start

    @ray.remote(num_cpus=0)
    class Doubler:
        def method(self, x):
            return x * 2

    @ray.remote(num_cpus=0)
    def task(local_method, actor_method):
        return local_method(1), ray.get(actor_method.remote(local_method(3)))

    a = Doubler.remote()
    assert ray.get(task.remote(_Local().method, a.method), timeout=60) == (11, 26)


def test_argument_counts_are_checked_at_remote(ray_start):
    ray = ray_start

    @ray.remote
    def f(a, b, **kw):
        return a

    @ray.remote(num_cpus=0)
    class A:
        def h(self, a, b, **kw):
            return a

        def g(self, *args, **kwargs):
            return len(args), sorted(kwargs)

    a = A.remote()
    for call in (lambda: f.remote(3), lambda: a.h.remote(3)):
        with pytest.raises(TypeError, match="missing a required argument: 'b'"):
            call()
    with pytest.raises(TypeError, match="too many positional arguments"):
        a.h.remote(1, 2, 3)
    assert ray.get([f.remote(1, 2, c=3), a.h.remote(1, 2, c=3)], timeout=60) == [1, 1]
    assert ray.get(a.g.remote(1, 2, x=3), timeout=60) == (2, ["x"])


def test_decorator_misuse_is_refused_at_decoration(ray_start):
    ray = ray_start
    with pytest.raises(AssertionError, match="The @ray.remote decorator must be applied either with no arguments "
                                             "and no parentheses"):
        @ray.remote()
        def f():
            pass

    for options in ({"invalid_kwarg": 0}, {"num_cpus": 1, "invalid_kwarg": 0}):
        with pytest.raises(ValueError, match="Invalid option keyword invalid_kwarg for remote functions"):
            @ray.remote(**options)
            def g():
                pass

        with pytest.raises(ValueError, match="Invalid option keyword invalid_kwarg for actors"):
            @ray.remote(**options)
            class C:
                pass
