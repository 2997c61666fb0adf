# SPDX-License-Identifier: Apache-2.0
"""Ray parity: behaviours Ray's own tests expect, each checked against real
Ray too (every test here is ray_compat: scripts/test_real_ray.sh runs it on
Ray 2.43.0, scripts/test.sh on beam): task argument resolution, the method
table, the ActorClass's surface, argument and option errors at .remote(),
auto-init, resources as Ray schedules them, placement group details, zero-copy
numpy values, remote error reprs, num_returns and the runtime context."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from beamkit.daemon import run_driver

pytestmark = pytest.mark.ray_compat


# -- tasks and arguments -------------------------------------------------------


def test_task_resolves_top_level_refs_only(ray_start):
    ray = ray_start

    @ray.remote
    def kinds(x, *rest, y=None):
        return type(x).__name__, [type(r).__name__ for r in rest], type(y).__name__, x

    assert ray.get(kinds.remote(ray.put(3))) == ("int", [], "NoneType", 3)
    assert ray.get(kinds.remote(1, ray.put("a"), y=ray.put(2.0)))[:3] == ("int", ["str"], "float")
    # nested refs stay refs
    name, _, _, value = ray.get(kinds.remote([ray.put(3)]))
    assert name == "list" and isinstance(value[0], ray.ObjectRef) and ray.get(value[0]) == 3
    # a task's result passed on is resolved too
    assert ray.get(kinds.remote(kinds.remote(5)))[3][3] == 5


def test_actor_call_resolves_top_level_refs_only(ray_start):
    ray = ray_start

    @ray.remote(num_cpus=0)
    class A:
        def kinds(self, x, y=None):
            return type(x).__name__, type(y).__name__

    a = A.remote()
    assert ray.get(a.kinds.remote(ray.put(1), y=ray.put("s"))) == ("int", "str")
    assert ray.get(a.kinds.remote({"k": ray.put(1)})) == ("dict", "NoneType")


def test_methods_are_looked_up_on_the_class(ray_start):
    ray = ray_start

    @ray.remote(num_cpus=0)
    class Shadowed:
        def __init__(self):
            self.value = 0  # an instance attribute with a method's name

        def value(self):
            return "method"

        def __getattr__(self, name):  # never probed for a method
            raise RuntimeError(f"probed {name}")

        @staticmethod
        def static(x):
            return x + 1

        @classmethod
        def klass(cls):
            return cls.__name__

    a = Shadowed.remote()
    assert ray.get(a.value.remote()) == "method"
    assert ray.get(a.static.remote(1)) == 2
    assert ray.get(a.klass.remote()) == "Shadowed"
    with pytest.raises(AttributeError):
        a.nothing.remote()


# -- the ActorClass's surface ----------------------------------------------------


class _Base:
    INHERITED = "base"

    def base_method(self):
        return "base"


def test_actor_class_keeps_the_class_surface(ray_start):
    ray = ray_start

    @ray.remote
    class Cls(_Base):
        ATTR = 5

        @staticmethod
        def helper(x):
            return x * 2

        @classmethod
        def factory(cls):
            return cls.ATTR

        def method(self):
            return self.ATTR

    assert Cls.ATTR == 5
    assert Cls.INHERITED == "base"
    assert Cls.helper(4) == 8
    assert Cls.factory() == 5
    assert isinstance(Cls, ray.actor.ActorClass)
    with pytest.raises(AttributeError):
        Cls.missing
    qual = re.escape("test_actor_class_keeps_the_class_surface.<locals>.Cls")
    with pytest.raises(
        TypeError,
        match=rf"Actors cannot be instantiated directly. Instead of '{qual}\(\)', use " rf"'{qual}.remote\(\)'.",
    ):
        Cls()
    a = Cls.options(num_cpus=0).remote()
    assert ray.get(a.base_method.remote()) == "base"
    with pytest.raises(
        TypeError,
        match=r"Actor methods cannot be called directly. Instead of running "
        r"'object.method\(\)', try 'object.method.remote\(\)'.",
    ):
        a.method()


def test_subclassing_an_actor_class_is_refused(ray_start):
    ray = ray_start

    @ray.remote
    class Parent:
        pass

    with pytest.raises(
        ray.actor.ActorClassInheritanceException,
        match="Attempted to define subclass 'Child' of actor class "
        "'test_subclassing_an_actor_class_is_refused.<locals>.Parent'. Inheriting from actor "
        "classes is not currently supported.",
    ):

        class Child(Parent):
            pass

    assert issubclass(ray.actor.ActorClassInheritanceException, TypeError)


def test_remote_function_called_directly(ray_start):
    ray = ray_start

    @ray.remote
    def f():
        return 1

    with pytest.raises(TypeError, match=rf"Instead of running '{__name__}.f\(\)', try '{__name__}.f.remote\(\)'"):
        f()


# -- argument errors at .remote() ------------------------------------------------


def test_argument_errors_raise_at_remote(ray_start):
    ray = ray_start

    @ray.remote
    def f(x, y=1):
        return x + y

    @ray.remote
    class A:
        def __init__(self, start):
            self.start = start

        def add(self, k, *, scale=1):
            return self.start + k * scale

        @staticmethod
        def double(x):
            return 2 * x

    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        f.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        f.remote(1, 2, 3)
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'z'"):
        f.remote(1, z=2)
    with pytest.raises(TypeError, match="missing a required argument: 'start'"):
        A.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        A.remote(1, 2)
    a = A.options(num_cpus=0).remote(10)
    with pytest.raises(TypeError, match="too many positional arguments"):
        a.add.remote(1, 2)
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'bad'"):
        a.add.remote(1, bad=2)
    with pytest.raises(TypeError, match="too many positional arguments"):
        a.double.remote(1, 2)
    # the actor lives on and good calls run
    assert ray.get([f.remote(1), a.add.remote(2, scale=3), a.double.remote(4)]) == [2, 16, 8]


def test_invalid_remote_and_options_arguments(ray_start):
    ray = ray_start

    def fn():
        return 1

    class C:
        pass

    with pytest.raises(ValueError, match="Invalid option keyword foo for remote functions"):
        ray.remote(foo=1)(fn)
    with pytest.raises(ValueError, match="Invalid option keyword foo for actors"):
        ray.remote(foo=1)(C)
    with pytest.raises(ValueError, match="Invalid option keyword lifetime for remote functions"):
        ray.remote(fn).options(lifetime="detached")
    with pytest.raises(ValueError, match="Invalid option keyword foo for actors"):
        ray.remote(C).options(foo=1)
    with pytest.raises(ValueError, match="The quantity of resource num_cpus cannot be negative"):
        ray.remote(num_cpus=-1)(fn)
    with pytest.raises(ValueError, match="The quantity of resource num_gpus cannot be negative"):
        ray.remote(fn).options(num_gpus=-1)
    with pytest.raises(TypeError, match="The type of keyword 'num_cpus' must be"):
        ray.remote(C).options(num_cpus="1")
    with pytest.raises(ValueError, match="The keyword 'max_restarts' only accepts None, 0, -1 or a positive"):
        ray.remote(C).options(max_restarts=-2)
    with pytest.raises(ValueError, match="Setting 'max_calls' is not supported in '.options\\(\\)'."):
        ray.remote(fn).options(max_calls=1)
    with pytest.raises(ValueError, match="The actor name must be specified to use `get_if_exists`."):
        ray.remote(C).options(get_if_exists=True)
    with pytest.raises(AssertionError, match="The @ray.remote decorator must be applied either with no arguments"):
        ray.remote(1, 2)


# -- resources --------------------------------------------------------------------


def test_cpu_gpu_memory_and_bundle_refused_in_resources(ray_start):
    ray = ray_start

    @ray.remote
    def f():
        return 1

    @ray.remote
    class A:
        pass

    cpu_gpu = "Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' in 'resources' keyword"
    for res in ({"CPU": 1}, {"GPU": 1}):
        with pytest.raises(ValueError, match=cpu_gpu):
            f.options(resources=res)
        with pytest.raises(ValueError, match=cpu_gpu):
            A.options(resources=res)
    memory = "The resources dictionary must not contain the key 'memory' or 'object_store_memory'"
    for res in ({"memory": 1}, {"object_store_memory": 1}):
        with pytest.raises(ValueError, match=memory):
            f.options(resources=res).remote()
        with pytest.raises(ValueError, match=memory):
            A.options(resources=res).remote()
    bundle = "The resource should not include `bundle` which is reserved for Ray"
    with pytest.raises(ValueError, match=bundle):
        f.options(resources={"bundle": 1}).remote()
    with pytest.raises(ValueError, match=bundle):
        A.options(resources={"bundle": 1}).remote()


def test_default_actor_needs_a_cpu_to_be_placed(ray_env):
    ray = ray_env(num_cpus=0, num_gpus=0)

    @ray.remote
    class A:
        def ping(self):
            return "pong"

    pending = A.remote()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(pending.ping.remote(), timeout=2)
    # an actor that asks for no CPU runs: 0 to run
    placed = A.options(num_cpus=0).remote()  # (a method holds its handle weakly, as Ray's)
    assert ray.get(placed.ping.remote(), timeout=60) == "pong"


def test_default_actor_holds_no_cpu_once_placed(ray_env):
    ray = ray_env(num_cpus=1, num_gpus=0)

    @ray.remote
    class A:
        def ping(self):
            return "pong"

    actors = [A.remote() for _ in range(3)]
    # each is placed on the one CPU and gives it back: all three run
    assert ray.get([a.ping.remote() for a in actors], timeout=60) == ["pong"] * 3
    assert ray.available_resources().get("CPU") == 1.0


def test_init_sizes_refused_when_connecting(ray_start):
    ray = ray_start
    address = ray.get_runtime_context().gcs_address
    out = run_driver(
        """
        import ray
        for kw in ({"num_cpus": 1}, {"num_gpus": 1}, {"resources": {"a": 1}}):
            try:
                ray.init(address=address, **kw)
                print("connected")
                ray.shutdown()
            except ValueError as e:
                print("ValueError:", e)
    """,
        names={"address": address},
        timeout=120,
    )
    assert out.stdout.splitlines() == [
        "ValueError: When connecting to an existing cluster, num_cpus and num_gpus must not be provided.",
        "ValueError: When connecting to an existing cluster, num_cpus and num_gpus must not be provided.",
        "ValueError: When connecting to an existing cluster, resources must not be provided.",
    ], out.stderr[-2000:]


def test_get_runtime_context_and_auto_connect_off():
    """Before ray.init(): get_runtime_context() initialises as Ray 2.43 does;
    with auto-connect off it does not, and .remote() raises."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import ray
        import ray._private.auto_init_hook as hook
        hook.enable_auto_connect = False

        @ray.remote
        class A:
            pass

        @ray.remote
        def f():
            pass

        ray.get_runtime_context()
        print("initialized", ray.is_initialized())
        for call in (A.remote, f.remote, lambda: ray.put(1)):
            try:
                call()
            except ray.exceptions.RaySystemError as e:
                print("RaySystemError", e)
    """),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    msg = "RaySystemError System error: Ray has not been started yet. You can start Ray with 'ray.init()'."
    assert out.stdout.splitlines() == ["initialized False", msg, msg, msg], out.stderr[-2000:]


# -- placement groups ------------------------------------------------------------


def test_bundle_is_a_reserved_resource_name(ray_start):
    ray = ray_start
    from ray.util.placement_group import placement_group

    with pytest.raises(ray.exceptions.RaySystemError, match="bundle is a system reserved resource"):
        placement_group([{"CPU": 1}, {"bundle": 1}])


def test_bundle_specs_drop_zero_amounts(ray_start):
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([{"CPU": 1, "GPU": 0}, {"CPU": 1}])
    assert pg.bundle_specs == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert pg.wait(60)
    assert pg.bundle_specs == [{"CPU": 1.0}, {"CPU": 1.0}]
    remove_placement_group(pg)


def test_actor_asking_what_its_bundle_lacks_raises(ray_start):
    ray = ray_start
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote
    class A:
        def ping(self):
            return "pong"

    pg = placement_group([{"CPU": 1}, {"CPU": 1, "GPU": 1}])
    assert pg.wait(60)
    bundle_0 = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
    # Ray checks the request against every bundle (not only the one named)
    with pytest.raises(
        ValueError,
        match=r"Cannot schedule .*A with the placement group because the resource "
        r"request \{'GPU': 2, 'CPU': 1\} cannot fit into any bundles for the "
        r"placement group, \[\{'CPU': 1.0\}, \{",
    ):
        A.options(num_gpus=2, scheduling_strategy=bundle_0).remote()
    with pytest.raises(ValueError, match=r"resource request \{'custom': 1, 'CPU': 1\} cannot fit into any bundles"):
        A.options(resources={"custom": 1}, scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote()
    # the bundle that has a GPU takes it
    fits = A.options(num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 1)).remote()
    assert ray.get(fits.ping.remote(), timeout=60) == "pong"
    remove_placement_group(pg)


def test_default_actor_in_a_cpu_less_bundle_raises(ray_start):
    ray = ray_start
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote
    class A:
        pass

    pg = placement_group([{"GPU": 1}])
    assert pg.wait(60)
    with pytest.raises(
        ValueError,
        match=r"the actor requires 1 CPU for creation, but it cannot fit into any bundles "
        r"for the placement group, \[\{'GPU': 1.0\}\]. Consider creating a "
        r"placement group with CPU resources.",
    ):
        A.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    remove_placement_group(pg)


# -- objects -----------------------------------------------------------------------


def test_numpy_values_are_read_only_views(ray_start):
    ray = ray_start
    for arr in (np.arange(10), np.ones((512, 1024), dtype=np.float32)):
        got = ray.get(ray.put(arr))
        assert not got.flags.writeable
        assert got.base is not None
        np.testing.assert_array_equal(got, arr)
        with pytest.raises(ValueError, match="read-only"):
            got[0] = 1

    @ray.remote
    def make():
        return {"a": np.arange(6).reshape(2, 3), "n": 1}

    value = ray.get(make.remote())
    assert value["n"] == 1 and not value["a"].flags.writeable
    assert value["a"].tolist() == [[0, 1, 2], [3, 4, 5]]


# -- errors ------------------------------------------------------------------------


def test_remote_error_repr_uses_the_actors_repr(ray_start):
    ray = ray_start

    @ray.remote(num_cpus=0)
    class WithRepr:
        def __repr__(self):
            return "WithRepr(id=7)"

        def fail(self):
            raise ValueError("boom")

    a = WithRepr.remote()
    with pytest.raises(ValueError) as info:
        ray.get(a.fail.remote())
    assert isinstance(info.value, ray.exceptions.RayTaskError)
    assert "repr=WithRepr(id=7))" in str(info.value)
    assert "ray::WithRepr.fail()" in str(info.value)


# -- issue 15: num_returns, the runtime context ------------------------------------


def test_task_num_returns_gives_a_list_of_refs(ray_start):
    ray = ray_start

    @ray.remote(num_returns=3)
    def three():
        return 1, "b", [3]

    refs = three.remote()
    assert isinstance(refs, list) and len(refs) == 3
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs) == [1, "b", [3]]

    @ray.remote
    def one():
        return (1, 2)

    assert ray.get(one.remote()) == (1, 2)
    assert ray.get(one.options(num_returns=2).remote()) == [1, 2]


def test_runtime_context_ids(ray_start):
    ray = ray_start
    ctx = ray.get_runtime_context()
    assert ctx.get_node_id() == ctx.node_id.hex()
    assert isinstance(ctx.node_id, ray.NodeID)
    assert set(ctx.get()) == {"job_id", "node_id", "namespace"}

    @ray.remote(num_cpus=0)
    class A:
        def ids(self):
            c = ray.get_runtime_context()
            got = c.get()
            return sorted(got), got["actor_id"].hex(), c.get_actor_id(), got["node_id"].hex(), c.get_node_id()

    a = A.remote()
    keys, actor_hex, actor_id, node_hex, node_id = ray.get(a.ids.remote())
    assert keys == ["actor_id", "job_id", "namespace", "node_id", "task_id"]
    assert actor_hex == actor_id == a._actor_id.hex()
    assert node_hex == node_id
    assert a._actor_id.job_id.hex() == ctx.get_job_id()


def test_get_assigned_resources(ray_start):
    ray = ray_start

    @ray.remote
    def task():
        return ray.get_runtime_context().get_assigned_resources()

    @ray.remote(num_gpus=1)
    class G:
        def assigned(self):
            return ray.get_runtime_context().get_assigned_resources()

    assert ray.get(task.options(num_cpus=2, num_gpus=0.5).remote()) == {"CPU": 2.0, "GPU": 0.5}

    # an actor that names a resource holds 1 CPU too, as Ray's
    def assigned(actor_class):
        g = actor_class.remote()  # (a method holds its handle weakly, as Ray's)
        return ray.get(g.assigned.remote())

    assert assigned(G) == {"CPU": 1.0, "GPU": 1.0}
    assert assigned(G.options(num_cpus=0)) == {"GPU": 1.0}
    assert assigned(G.options(num_cpus=1, num_gpus=0)) == {"CPU": 1.0}
    # a default actor holds nothing
    assert assigned(G.options(num_gpus=None)) == {}
    with pytest.raises(AssertionError, match="This method is only available when the process is a"):
        ray.get_runtime_context().get_assigned_resources()  # in the driver
