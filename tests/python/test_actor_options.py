# SPDX-License-Identifier: Apache-2.0
"""The actor options vLLM's newest code passes, end to end: max_concurrency
(threaded actors), asyncio actors, namespaces, NodeAffinitySchedulingStrategy,
lifetime="detached", and the refusal of every option beam does not run.

Tests marked ray_compat use only Ray's public API and pass on real Ray too:
run with /opt/ray-venv/bin/python and without beam's python/ on the path,
the `ray_env` fixture starts one Ray instance for the module instead of a
beamd. The others check beam's own side (its refusals, its daemon, a
cluster of beamds) and are skipped on Ray.
"""

import sys
import threading
import time

import pytest

import ray
from beamkit.daemon import one_ray_for_module, run_driver
from beamkit.procs import wait_until

ON_RAY = getattr(ray, "__commit__", "") != "beam"
beam_only = pytest.mark.skipif(ON_RAY, reason="checks beam itself")


@pytest.fixture(scope="module")
def ray_env():
    """One ray.init() for the module: a fresh beamd with 8 CPUs, or a local real
    Ray with the same resources."""
    with one_ray_for_module(num_cpus=8) as d:
        yield d


def _other_driver():
    """run_driver's arguments for another driver of this module's cluster
    (ADDRESS names it there), which must exit 0."""
    address = ray.get_runtime_context().gcs_address
    return {"names": {"ADDRESS": address}, "unset": ("RAY_ADDRESS",), "timeout": 120, "check": True}


# --- max_concurrency: threaded actors ---


@ray.remote(max_concurrency=3)
class Meeting:
    """Three calls must be inside meet() at once for any of them to leave."""

    def __init__(self):
        self.barrier = threading.Barrier(3, timeout=60)

    def meet(self):
        self.barrier.wait()
        return threading.get_ident()


@pytest.mark.ray_compat
def test_threaded_actor_runs_max_concurrency_calls_at_once(ray_env):
    m = Meeting.remote()
    idents = ray.get([m.meet.remote() for _ in range(3)], timeout=90)
    assert len(set(idents)) == 3  # three threads, none of them waiting on another


@ray.remote(max_concurrency=2)
class Handoff:
    """vLLM's weight-transfer shape: one call blocks until another arrives."""

    def __init__(self):
        self.ready = threading.Event()

    def receive(self):
        return self.ready.wait(timeout=60)

    def send(self):
        self.ready.set()
        return True


@pytest.mark.ray_compat
def test_threaded_actor_call_waits_for_a_later_call(ray_env):
    h = Handoff.remote()
    got = h.receive.remote()
    assert ray.get(h.send.remote(), timeout=60) is True
    assert ray.get(got, timeout=60) is True


@ray.remote
class Log:
    def __init__(self):
        self.events = []

    def step(self, i):
        self.events.append(("in", i))
        time.sleep(0.01)
        self.events.append(("out", i))
        return threading.current_thread().name

    def log(self):
        return self.events


@pytest.mark.ray_compat
def test_default_actor_runs_one_call_at_a_time_in_order(ray_env):
    a = Log.remote()
    threads = set(ray.get([a.step.remote(i) for i in range(20)], timeout=60))
    expected = [e for i in range(20) for e in (("in", i), ("out", i))]
    assert ray.get(a.log.remote(), timeout=30) == expected
    assert threads == {"MainThread"}


@ray.remote(max_concurrency=2)
class Quitter:
    def quit(self):
        sys.exit(0)

    def ping(self):
        return "pong"


@pytest.mark.ray_compat
def test_sys_exit_in_a_threaded_actor_ends_the_actor(ray_env):
    q = Quitter.remote()
    assert ray.get(q.ping.remote(), timeout=60) == "pong"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(q.quit.remote(), timeout=60)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(q.ping.remote(), timeout=60)


# --- asyncio actors ---


@ray.remote
class AsyncActor:
    def __init__(self):
        import asyncio

        self.event = asyncio.Event()
        self.inside = 0
        self.most = 0

    async def wait(self):
        await self.event.wait()
        return "released"

    async def release(self):
        self.event.set()
        return "set"

    async def count(self, delay):
        import asyncio

        self.inside += 1
        self.most = max(self.most, self.inside)
        await asyncio.sleep(delay)
        self.inside -= 1
        return self.most

    async def gather(self, n):
        """Returns once n calls are inside at the same time."""
        self.inside += 1
        if self.inside >= n:
            self.event.set()
        await self.event.wait()
        return n

    async def thread(self):
        return threading.current_thread().name

    def sync_thread(self):
        import asyncio

        asyncio.get_running_loop()  # raises outside the event loop
        return threading.current_thread().name

    async def add(self, x, y):
        return x + y


@pytest.mark.ray_compat
def test_async_actor_interleaves_awaiting_calls(ray_env):
    a = AsyncActor.remote()
    waiting = a.wait.remote()
    assert ray.get(a.release.remote(), timeout=60) == "set"
    assert ray.get(waiting, timeout=60) == "released"


@pytest.mark.ray_compat
def test_async_actor_sync_methods_run_on_its_event_loop(ray_env):
    a = AsyncActor.remote()
    on_loop = ray.get(a.thread.remote(), timeout=60)
    assert ray.get(a.sync_thread.remote(), timeout=60) == on_loop
    assert on_loop != "MainThread"


@pytest.mark.ray_compat
def test_async_actor_max_concurrency_bounds_calls_in_flight(ray_env):
    one = AsyncActor.options(max_concurrency=1).remote()
    assert max(ray.get([one.count.remote(0.02) for _ in range(5)], timeout=60)) == 1
    many = AsyncActor.remote()  # Ray's default for asyncio actors: 1000
    assert ray.get([many.gather.remote(50) for _ in range(50)], timeout=60) == [50] * 50
    three = AsyncActor.options(max_concurrency=3).remote()
    assert ray.get([three.gather.remote(3) for _ in range(6)], timeout=60) == [3] * 6


@pytest.mark.ray_compat
def test_async_actor_argument_from_its_own_call(ray_env):
    a = AsyncActor.remote()
    assert ray.get(a.add.remote(a.add.remote(1, 2), 10), timeout=60) == 13


@pytest.mark.ray_compat
def test_async_remote_function_is_refused(ray_env):
    async def twice(x):
        return 2 * x

    with pytest.raises(ValueError, match="'async def' should not be used for remote tasks"):
        ray.remote(twice)


# --- namespaces ---


@ray.remote
class Named:
    def __init__(self, tag="x"):
        self.tag = tag

    def get(self):
        return self.tag

    def namespace(self):
        return ray.get_runtime_context().namespace

    def lookup(self, name):
        h = ray.get_actor(name)  # kept: Ray loses a handle used only as a temporary
        return ray.get(h.get.remote())


@pytest.mark.ray_compat
def test_driver_has_an_anonymous_namespace_of_its_own(ray_env):
    ns = ray.get_runtime_context().namespace
    assert isinstance(ns, str) and ns
    a = Named.options(name="opt-anon").remote("mine")
    h = ray.get_actor("opt-anon")
    assert ray.get(h.get.remote(), timeout=60) == "mine"
    out = run_driver(
        """
        import ray
        ray.init(address=ADDRESS)
        other = ray.get_runtime_context().namespace
        try:
            ray.get_actor("opt-anon")
            print("FOUND")
        except ValueError:
            print("NOT FOUND")
        print("NS", other)
    """,
        **_other_driver(),
    ).stdout
    lines = out.split("\n")
    assert "NOT FOUND" in lines
    assert f"NS {ns}" not in lines
    ray.kill(a)


@pytest.mark.ray_compat
def test_named_actors_are_scoped_per_namespace(ray_env):
    a = Named.options(name="opt-scoped", namespace="opt-ns-a").remote("a")
    b = Named.options(name="opt-scoped", namespace="opt-ns-b").remote("b")
    ha = ray.get_actor("opt-scoped", namespace="opt-ns-a")
    hb = ray.get_actor("opt-scoped", namespace="opt-ns-b")
    assert ray.get([ha.get.remote(), hb.get.remote()], timeout=60) == ["a", "b"]
    with pytest.raises(ValueError, match="Failed to look up actor with name 'opt-scoped'"):
        ray.get_actor("opt-scoped")
    with pytest.raises(ValueError, match=r"The name opt-scoped \(namespace=opt-ns-a\) is already taken"):
        Named.options(name="opt-scoped", namespace="opt-ns-a").remote()
    names = ray.util.list_named_actors(all_namespaces=True)
    assert {"name": "opt-scoped", "namespace": "opt-ns-a"} in names
    assert {"name": "opt-scoped", "namespace": "opt-ns-b"} in names
    assert "opt-scoped" not in ray.util.list_named_actors()
    ray.kill(a)
    ray.kill(b)


@pytest.mark.ray_compat
def test_drivers_in_one_namespace_share_named_actors(ray_env):
    a = Named.options(name="opt-shared", namespace="opt-team").remote("team")
    ray.get(a.get.remote(), timeout=60)
    out = run_driver(
        """
        import ray
        ray.init(address=ADDRESS, namespace="opt-team")
        print("NS", ray.get_runtime_context().namespace)
        h = ray.get_actor("opt-shared")
        print("GOT", ray.get(h.get.remote()))
        print("MINE", ray.util.list_named_actors())
    """,
        **_other_driver(),
    ).stdout
    assert "NS opt-team" in out and "GOT team" in out and "MINE ['opt-shared']" in out
    ray.kill(a)


@pytest.mark.ray_compat
def test_actor_runs_in_its_creators_namespace(ray_env):
    ns = ray.get_runtime_context().namespace
    target = Named.options(name="opt-target").remote("target")
    other = Named.options(name="opt-elsewhere", namespace="opt-else").remote()
    # the actor's job namespace is the driver's, whatever namespace its name is in
    assert ray.get(other.namespace.remote(), timeout=60) == ns
    assert ray.get(other.lookup.remote("opt-target"), timeout=60) == "target"
    ray.kill(target)
    ray.kill(other)


@pytest.mark.ray_compat
def test_get_if_exists_in_a_namespace(ray_env):
    a = Named.options(name="opt-gie", namespace="opt-gie-ns", get_if_exists=True).remote("first")
    b = Named.options(name="opt-gie", namespace="opt-gie-ns", get_if_exists=True).remote("second")
    assert ray.get(b.get.remote(), timeout=60) == "first"
    assert a == b
    ray.kill(a)


@pytest.mark.ray_compat
def test_namespace_and_name_arguments_are_checked(ray_env):
    with pytest.raises(ValueError, match="non-empty"):
        ray.get_actor("")
    with pytest.raises(ValueError, match="not a valid namespace"):
        ray.get_actor("x", namespace="")
    with pytest.raises(ValueError, match="not a valid namespace"):
        Named.options(name="opt-bad", namespace="").remote()
    with pytest.raises(ValueError, match="empty string"):
        Named.options(name="").remote()
    with pytest.raises(ValueError, match="lifetime"):
        Named.options(lifetime="forever").remote()
    with pytest.raises(ValueError, match="max_concurrency"):
        Named.options(max_concurrency=-1).remote()
    with pytest.raises(ValueError, match="get_if_exists"):
        Named.options(get_if_exists=True).remote()


@pytest.mark.ray_compat
def test_init_refuses_an_empty_namespace(ray_env):
    out = run_driver(
        """
        import ray
        try:
            ray.init(address=ADDRESS, namespace="")
        except ValueError as e:
            print("REFUSED", e)
        print("INIT", ray.is_initialized())
    """,
        **_other_driver(),
    ).stdout
    assert "REFUSED" in out and "not a valid namespace" in out and "INIT False" in out


# --- lifetime="detached" ---


@pytest.mark.ray_compat
def test_detached_actor_outlives_its_driver_until_killed(ray_env):
    out = run_driver(
        """
        import os, ray
        ray.init(address=ADDRESS, namespace="opt-det")

        @ray.remote
        class Keeper:
            def __init__(self):
                self.n = 0

            def bump(self):
                self.n += 1
                return self.n

            def pid(self):
                return os.getpid()

        k = Keeper.options(name="opt-keeper", lifetime="detached").remote()
        print("N", ray.get(k.bump.remote()))
        print("PID", ray.get(k.pid.remote()))
    """,
        **_other_driver(),
    ).stdout
    assert "N 1" in out
    # the driver is gone; the actor, its state and its name are not
    k = ray.get_actor("opt-keeper", namespace="opt-det")
    assert ray.get(k.bump.remote(), timeout=60) == 2
    # dropping every handle does not end it either
    del k
    import gc

    gc.collect()
    k = ray.get_actor("opt-keeper", namespace="opt-det")
    assert ray.get(k.bump.remote(), timeout=60) == 3
    ray.kill(k)
    # Ray's kill is asynchronous: a call sent at once may still be served
    import time

    for _ in range(100):
        try:
            ray.get(k.bump.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the detached actor still answers 10 s after ray.kill")

    def name_released():
        try:
            ray.get_actor("opt-keeper", namespace="opt-det")
            return False
        except ValueError:
            return True

    assert wait_until(name_released, 30, 0.05)


@pytest.mark.ray_compat
def test_non_detached_actor_dies_with_its_driver(ray_env):
    run_driver(
        """
        import ray
        ray.init(address=ADDRESS, namespace="opt-nondet")

        @ray.remote
        class Short:
            def ping(self):
                return "pong"

        s = Short.options(name="opt-short", lifetime="non_detached").remote()
        print(ray.get(s.ping.remote()))
    """,
        **_other_driver(),
    ).stdout

    def gone():
        try:
            h = ray.get_actor("opt-short", namespace="opt-nondet")
        except ValueError:
            return True
        try:
            ray.get(h.ping.remote(), timeout=30)
            return False
        except ray.exceptions.RayActorError:
            return True

    assert wait_until(gone, 30, 0.05)


# --- NodeAffinitySchedulingStrategy on one node ---


@ray.remote
class Where:
    def node(self):
        return ray.get_runtime_context().get_node_id()


def _affinity(node_id, soft):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


@pytest.mark.ray_compat
def test_node_affinity_to_this_node(ray_env):
    here = ray.get_runtime_context().get_node_id()
    for soft in (False, True):
        a = Where.options(scheduling_strategy=_affinity(here, soft)).remote()
        assert ray.get(a.node.remote(), timeout=60) == here
        ray.kill(a)


@pytest.mark.ray_compat
def test_hard_node_affinity_to_a_missing_node_is_unschedulable(ray_env):
    missing = ray.NodeID.from_random().hex()
    a = Where.options(scheduling_strategy=_affinity(missing, False)).remote()
    with pytest.raises(ray.exceptions.ActorUnschedulableError, match="soft=False"):
        ray.get(a.node.remote(), timeout=60)
    # soft falls back to a node that exists
    b = Where.options(scheduling_strategy=_affinity(missing, True)).remote()
    assert ray.get(b.node.remote(), timeout=60) == ray.get_runtime_context().get_node_id()
    ray.kill(b)


@pytest.mark.ray_compat
def test_hard_node_affinity_to_a_node_too_small_is_unschedulable(ray_env):
    here = ray.get_runtime_context().get_node_id()
    a = Where.options(num_cpus=1000, scheduling_strategy=_affinity(here, False)).remote()
    with pytest.raises(ray.exceptions.ActorUnschedulableError):
        ray.get(a.node.remote(), timeout=60)


@pytest.mark.ray_compat
def test_node_affinity_to_a_full_node_waits_for_room(ray_env):
    here = ray.get_runtime_context().get_node_id()
    free = int(ray.available_resources().get("CPU", 0))
    assert free >= 1
    hog = Where.options(num_cpus=free).remote()
    assert ray.get(hog.node.remote(), timeout=60) == here
    for soft in (False, True):
        waiting = Where.options(num_cpus=1, scheduling_strategy=_affinity(here, soft)).remote()
        pending = waiting.node.remote()
        ready, _ = ray.wait([pending], timeout=1.0)
        assert ready == []  # pending, neither failed nor placed
        if not soft:
            hard_pending, hard_actor = pending, waiting
        else:
            soft_pending, soft_actor = pending, waiting
    ray.kill(hog)
    assert ray.get(hard_pending, timeout=60) == here
    ray.kill(hard_actor)
    assert ray.get(soft_pending, timeout=60) == here
    ray.kill(soft_actor)


@pytest.mark.ray_compat
def test_spread_strategy_on_one_node(ray_env):
    a = Where.options(scheduling_strategy="SPREAD").remote()
    assert ray.get(a.node.remote(), timeout=60) == ray.get_runtime_context().get_node_id()
    ray.kill(a)


# --- the deprecated placement_group= options ---


@pytest.mark.ray_compat
def test_placement_group_option_places_the_actor_in_the_group(ray_env):
    import warnings

    from ray.util import placement_group, remove_placement_group

    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=60)

    @ray.remote(num_cpus=1)
    class InGroup:
        def group(self):
            from ray.util import get_current_placement_group

            g = get_current_placement_group()
            return g.id.hex() if g else None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        a = InGroup.options(placement_group=pg, placement_group_bundle_index=0).remote()
    assert ray.get(a.group.remote(), timeout=60) == pg.id.hex()
    ray.kill(a)
    remove_placement_group(pg)


# --- what beam refuses, and what it accepts because it changes nothing ---


@beam_only
@pytest.mark.parametrize(
    "options",
    [
        {"max_pending_calls": 10},
        {"accelerator_type": "A100"},
    ],
)
def test_actor_options_beam_does_not_run_are_refused(ray_env, options):
    with pytest.raises(NotImplementedError, match=f"beam does not implement the actor option {list(options)[0]}"):
        Named.options(**options)


@beam_only
def test_concurrency_groups_are_refused(ray_env):
    with pytest.raises(NotImplementedError, match="concurrency_groups"):
        ray.remote(concurrency_groups={"io": 2})(type("Grouped", (), {"f": lambda self: 1}))


@beam_only
def test_node_affinity_private_flags_are_refused(ray_env):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    with pytest.raises(NotImplementedError, match="_spill_on_unavailable"):
        Where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, True, _spill_on_unavailable=True))


@beam_only
@pytest.mark.parametrize(
    "options",
    [
        {"retry_exceptions": True},
        {"num_returns": "dynamic"},  # n >= 0 runs (a list of refs)
    ],
)
def test_task_options_beam_does_not_run_are_refused(ray_env, options):
    def f():
        return 1

    with pytest.raises(NotImplementedError, match=f"beam does not implement the task option {list(options)[0]}"):
        ray.remote(**options)(f)


@beam_only
def test_unknown_options_are_invalid(ray_env):
    with pytest.raises(ValueError, match="Invalid option keyword label_selector for actors"):
        Named.options(label_selector={"a": "b"})
    with pytest.raises(ValueError, match="Invalid option keyword max_concurrency for remote functions"):
        ray.remote(max_concurrency=2)(lambda: 1)


@pytest.mark.ray_compat
def test_options_that_change_nothing_are_accepted(ray_env):
    a = Named.options(
        max_task_retries=3,
        max_restarts=0,
        max_pending_calls=-1,
        enable_task_events=False,
        _metadata={"x": {}},
        scheduling_strategy="DEFAULT",
        lifetime=None,
    ).remote("ok")
    assert ray.get(a.get.remote(), timeout=60) == "ok"
    ray.kill(a)

    @ray.remote(max_retries=0, retry_exceptions=False, max_calls=1)
    def one():
        return 1

    assert ray.get(one.options(name="labelled").remote(), timeout=60) == 1
    # a task's name is only a label: a second one with it is no conflict
    assert ray.get(one.options(name="labelled").remote(), timeout=60) == 1


@beam_only
def test_detached_actor_ends_with_the_daemon():
    from beamkit.daemon import Beamd
    from beamkit.procs import beam_processes

    d = Beamd(num_gpus=0, num_cpus=2)
    try:
        out = run_driver(
            """
            import os, ray
            ray.init()

            @ray.remote
            class Stays:
                def pid(self):
                    return os.getpid()

            s = Stays.options(name="opt-stays", lifetime="detached").remote()
            print("PID", ray.get(s.pid.remote()))
        """,
            env={"BEAM_SOCKET": d.socket},
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        pid = int(out.stdout.split("PID ")[1].split()[0])
        # the driver is gone, its detached actor is not
        assert beam_processes(d.socket) == [pid]
    finally:
        rc = d.stop()
    assert rc == 0
    assert wait_until(lambda: not beam_processes(d.socket), 10, 0.05)


# --- beam's own tables ---


@beam_only
def test_status_shows_namespace_and_detached(ray_env):
    a = Named.options(name="opt-status", namespace="opt-st", lifetime="detached").remote()
    ray.get(a.get.remote(), timeout=60)
    mine = [x for x in ray_env.status()["actors"] if x["name"] == "opt-status"]
    assert len(mine) == 1 and mine[0]["namespace"] == "opt-st" and mine[0]["detached"] is True
    ray.kill(a)


# --- NodeAffinitySchedulingStrategy on a cluster of beamds ---


@beam_only
def test_node_affinity_across_nodes(make_cluster):
    """Head 127.0.0.1 and members 127.0.0.2, 127.0.0.3: hard affinity pins
    to the member asked for; a member that dies takes a hard-pinned pending
    actor with it (unschedulable) while a soft one goes elsewhere."""
    ray.shutdown()  # this module's other driver (ray_env), if it ran: this test has its own cluster
    c = make_cluster(members=2, gpus=0, cpus=2)
    ray.init(address=c.head.socket)
    try:
        ids = c.alive_nodes()
        m1, m2 = c.members
        for node in (c.head, m1, m2):
            a = Where.options(scheduling_strategy=_affinity(ids[node.ip], False)).remote()
            assert ray.get(a.node.remote(), timeout=60) == ids[node.ip]
            ray.kill(a)
        # fill member 2, then ask for it hard and soft: both wait for room there
        hog = Where.options(num_cpus=2, scheduling_strategy=_affinity(ids[m2.ip], False)).remote()
        assert ray.get(hog.node.remote(), timeout=60) == ids[m2.ip]
        hard = Where.options(num_cpus=1, scheduling_strategy=_affinity(ids[m2.ip], False)).remote()
        soft = Where.options(num_cpus=1, scheduling_strategy=_affinity(ids[m2.ip], True)).remote()
        hard_ref, soft_ref = hard.node.remote(), soft.node.remote()
        assert ray.wait([hard_ref, soft_ref], num_returns=2, timeout=1.0)[0] == []
        # the member dies: the hard one can never be placed, the soft one goes elsewhere
        dead = ids[m2.ip]
        m2.expect_signal = True
        m2.kill9()
        assert c.wait_dead(dead, 30)
        with pytest.raises(ray.exceptions.ActorUnschedulableError):
            ray.get(hard_ref, timeout=60)
        assert ray.get(soft_ref, timeout=60) in (ids[c.head.ip], ids[m1.ip])
        # a node that is gone: hard is unschedulable at once, soft runs anywhere
        late = Where.options(scheduling_strategy=_affinity(dead, False)).remote()
        with pytest.raises(ray.exceptions.ActorUnschedulableError):
            ray.get(late.node.remote(), timeout=60)
        anywhere = Where.options(scheduling_strategy=_affinity(dead, True)).remote()
        assert ray.get(anywhere.node.remote(), timeout=60) in (ids[c.head.ip], ids[m1.ip])
        ray.kill(anywhere)
        # SPREAD deals actors round the live nodes: the one holding fewer actors first
        spread = [Where.options(scheduling_strategy="SPREAD").remote() for _ in range(2)]
        assert {ray.get(x.node.remote(), timeout=60) for x in spread} == {ids[c.head.ip], ids[m1.ip]}
    finally:
        ray.shutdown()
