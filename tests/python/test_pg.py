# SPDX-License-Identifier: Apache-2.0
"""Placement groups, resources and cluster state, end to end against a real
beamd (4 pretend GPUs, 8 CPUs, node ip 127.0.0.1): strategies, pending and
infeasible groups, removal, bundle charging, fractional GPUs, node: pinning,
handles across processes, the table's shape, the state functions' shapes, and
the flow vLLM's executors run."""

import copy as copy_module
import os
import pickle
import re

import pytest

from beamkit.daemon import Beamd, run_driver
from beamkit.pg import pg_api, pg_strategy
from beamkit.procs import wait_gone, wait_until

IP = "127.0.0.1"
HEX36 = re.compile(r"^[0-9a-f]{36}$")
HEX56 = re.compile(r"^[0-9a-f]{56}$")


def _totals_back(ray):
    """True once every resource is available again."""
    total = ray.cluster_resources()
    avail = ray.available_resources()
    return all(abs(avail.get(k, 0.0) - v) < 1e-6 for k, v in total.items())


def _pg_status(beamd, pg):
    (entry,) = [g for g in beamd.status()["placement_groups"] if g["placement_group_id"] == pg.id.hex()]
    return entry


def _make_probe(ray):
    @ray.remote(num_cpus=0, num_gpus=1)
    class Probe:
        def info(self):
            import ray as r

            ctx = r.get_runtime_context()
            return {
                "node_id": ctx.get_node_id(),
                "gpus": [str(g) for g in r.get_gpu_ids()],
                "accel": ctx.get_accelerator_ids()["GPU"],
                "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "pg": ctx.get_placement_group_id(),
                "pid": os.getpid(),
            }

        def ping(self):
            return "pong"

    return Probe


# --- strategies ---


@pytest.mark.parametrize("strategy", ["PACK", "SPREAD", "STRICT_PACK"])
def test_strategies_place_on_one_node(ray_start, strategy):
    ray = ray_start
    api = pg_api()
    node_id = ray.get_runtime_context().get_node_id()
    pg = api.placement_group([{"GPU": 1, "CPU": 1}] * 3, strategy=strategy)
    assert ray.get(pg.ready(), timeout=10) == pg
    t = api.placement_group_table(pg)
    assert t["state"] == "CREATED"
    assert t["strategy"] == strategy
    assert t["bundles_to_node_id"] == {0: node_id, 1: node_id, 2: node_id}
    avail = ray.available_resources()
    assert avail["GPU"] == 1.0 and avail["CPU"] == 5.0
    api.remove_placement_group(pg)
    assert wait_until(lambda: _totals_back(ray))


@pytest.mark.ray_compat
def test_strict_spread_one_bundle_placed_two_pending(ray_start):
    ray = ray_start
    api = pg_api()
    one = api.placement_group([{"GPU": 1}], strategy="STRICT_SPREAD")
    assert one.wait(10)
    two = api.placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_SPREAD")
    assert two.wait(0.2) is False
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(two.ready(), timeout=0)
    t = api.placement_group_table(two)
    assert t["state"] == "PENDING"
    assert t["bundles_to_node_id"] == {0: "", 1: ""}  # every bundle, no node yet (as Ray)
    # nothing of the pending group is reserved: only the placed one's GPU is used
    assert ray.available_resources()["GPU"] == 3.0


@pytest.mark.ray_compat
def test_strict_pack_that_cannot_fit_one_node_stays_pending(ray_start):
    ray = ray_start
    api = pg_api()
    pg = api.placement_group([{"GPU": 3}, {"GPU": 2}], strategy="STRICT_PACK")
    assert pg.wait(0.2) is False
    assert api.placement_group_table(pg)["state"] == "PENDING"
    assert ray.available_resources()["GPU"] == 4.0


# --- pending, infeasible ---


@pytest.mark.ray_compat
def test_pending_until_resources_free(ray_start):
    ray = ray_start
    api = pg_api()

    @ray.remote(num_cpus=0, num_gpus=4)
    class Hog:
        def ping(self):
            return 1

    hog = Hog.remote()
    assert ray.get(hog.ping.remote(), timeout=10) == 1
    pg = api.placement_group([{"GPU": 1}, {"GPU": 1}], strategy="PACK")
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(pg.ready(), timeout=0)
    assert pg.wait(0.2) is False
    ready, not_ready = ray.wait([pg.ready()], timeout=0.1)
    assert ready == [] and len(not_ready) == 1
    assert api.placement_group_table(pg)["state"] == "PENDING"
    ref = pg.ready()
    ray.kill(hog)
    ready, not_ready = ray.wait([ref], timeout=10)
    assert ready == [ref] and not_ready == []
    assert ray.get(ref) == pg
    assert api.placement_group_table(pg)["state"] == "CREATED"
    assert ray.available_resources()["GPU"] == 2.0


@pytest.mark.ray_compat
def test_actor_waits_for_a_pending_group(ray_start):
    """vLLM's DP manager submits actors into a group without waiting on
    ready(): they start once the group is placed."""
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)

    @ray.remote(num_cpus=0, num_gpus=4)
    class Hog:
        def ping(self):
            return 1

    hog = Hog.remote()
    ray.get(hog.ping.remote(), timeout=10)
    pg = api.placement_group([{"GPU": 1}], strategy="STRICT_PACK")
    a = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    ref = a.ping.remote()
    assert ray.wait([ref], timeout=0.3)[0] == []
    ray.kill(hog)
    assert ray.get(ref, timeout=10) == "pong"


@pytest.mark.parametrize(
    "bundles",
    [
        [{"GPU": 5}],
        [{"GPU": 1}] * 5,
        [{"CPU": 9}],
        [{"no_such_resource": 1}],
    ],
)
def test_infeasible_stays_pending(ray_start, bundles):
    ray = ray_start
    api = pg_api()
    pg = api.placement_group(bundles, strategy="PACK")
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(pg.ready(), timeout=0)
    assert pg.wait(0.2) is False
    assert api.placement_group_table(pg)["state"] == "PENDING"
    assert _totals_back(ray)
    # the daemon goes on placing what fits
    ok = api.placement_group([{"GPU": 1}])
    assert ok.wait(10)


@pytest.mark.parametrize(
    "bundles", [[], [{}], [{"GPU": 0}], [{"CPU": 0, "GPU": 0}], [{"GPU": 1}, {}], {"GPU": 1}, [{"GPU": -1}]]
)
def test_bad_bundles_raise_value_error(ray_start, bundles):
    api = pg_api()
    with pytest.raises(ValueError):
        api.placement_group(bundles)


def test_bad_strategy_and_lifetime_raise_value_error(ray_start):
    api = pg_api()
    with pytest.raises(ValueError):
        api.placement_group([{"GPU": 1}], strategy="BOGUS")
    with pytest.raises(ValueError):
        api.placement_group([{"GPU": 1}], strategy="pack")
    with pytest.raises(ValueError):
        api.placement_group([{"GPU": 1}], lifetime="forever")
    # nothing was created
    assert api.placement_group_table() == {}


# --- removal ---


def test_remove_kills_actors_and_returns_resources(ray_start, beamd):
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)
    pg = api.placement_group([{"GPU": 1, "CPU": 1}] * 2, strategy="PACK")
    assert pg.wait(10)
    actors = [Probe.options(scheduling_strategy=pg_strategy(pg, i)).remote() for i in range(2)]
    pids = [ray.get(a.info.remote(), timeout=10)["pid"] for a in actors]
    assert ray.available_resources()["GPU"] == 2.0
    api.remove_placement_group(pg)
    for a in actors:
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(a.ping.remote(), timeout=10)
    assert wait_until(lambda: _totals_back(ray))
    assert wait_gone(pids)
    assert api.placement_group_table(pg)["state"] == "REMOVED"
    assert _pg_status(beamd, pg)["state"] == "REMOVED"
    assert all(a["state"] == "DEAD" for a in beamd.status()["actors"])
    # removing twice is harmless
    api.remove_placement_group(pg)


def test_remove_pending_group_fails_its_waiting_actor(ray_start):
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)
    pg = api.placement_group([{"GPU": 8}])
    a = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    ref = a.ping.remote()
    assert ray.wait([ref], timeout=0.2)[0] == []
    api.remove_placement_group(pg)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(ref, timeout=10)
    assert _totals_back(ray)


def test_remove_fails_an_actor_queued_for_a_full_bundle(ray_start):
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)
    pg = api.placement_group([{"GPU": 1}])
    assert pg.wait(10)
    running = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    assert ray.get(running.ping.remote(), timeout=10) == "pong"
    queued = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    ref = queued.ping.remote()
    assert ray.wait([ref], timeout=0.2)[0] == []
    api.remove_placement_group(pg)
    for r in (ref, running.ping.remote()):
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(r, timeout=10)
    assert wait_until(lambda: _totals_back(ray))
    # and the freed GPU is not handed to the queued actor's ghost
    again = api.placement_group([{"GPU": 4}])
    assert again.wait(10)


def test_remove_kills_an_actor_mid_call_and_one_still_starting(ray_start):
    """vLLM's DP shutdown removes groups whose actors sit in run(); an actor
    may also still be in its constructor."""
    ray = ray_start
    api = pg_api()

    @ray.remote(num_cpus=0, num_gpus=1)
    class Busy:
        def __init__(self, delay=0.0):
            import time

            time.sleep(delay)

        def run(self):
            import time

            while True:
                time.sleep(1)

        def ping(self):
            return 1

    pg = api.placement_group([{"GPU": 1}, {"GPU": 1}])
    assert pg.wait(10)
    busy = Busy.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    ray.get(busy.ping.remote(), timeout=10)
    run_ref = busy.run.remote()
    slow = Busy.options(scheduling_strategy=pg_strategy(pg, 1)).remote(delay=30)
    slow_ref = slow.ping.remote()
    assert ray.wait([run_ref, slow_ref], timeout=0.2)[0] == []
    api.remove_placement_group(pg)
    ready, _ = ray.wait([run_ref, slow_ref], num_returns=2, timeout=10)
    assert len(ready) == 2
    for r in (run_ref, slow_ref):
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(r)
    assert wait_until(lambda: _totals_back(ray))


def test_ready_of_a_removed_group_does_not_hang(ray_start):
    ray = ray_start
    api = pg_api()
    pg = api.placement_group([{"GPU": 16}])
    ref = pg.ready()
    api.remove_placement_group(pg)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(ref, timeout=10)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(pg.ready(), timeout=10)
    # Ray's wait() raises for a removed group ("Placement group ... does not exist.")
    with pytest.raises(Exception):
        pg.wait(0.1)


@pytest.mark.ray_compat
def test_removed_group_is_not_found_by_name(ray_start):
    api = pg_api()
    pg = api.placement_group([{"CPU": 1}], name="short-lived")
    assert pg.wait(10)
    assert api.get_placement_group("short-lived") == pg
    api.remove_placement_group(pg)
    with pytest.raises(ValueError):
        api.get_placement_group("short-lived")
    with pytest.raises(ValueError):
        api.get_placement_group("never-made")


@pytest.mark.ray_compat
def test_handle_release_frees_the_bundle(ray_start):
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)
    pg = api.placement_group([{"GPU": 1}])
    assert pg.wait(10)
    a = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    ray.get(a.ping.remote(), timeout=10)
    del a  # the last handle: the actor exits and gives the bundle back
    b = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    assert ray.get(b.ping.remote(), timeout=10) == "pong"


def test_any_bundle_means_one_that_has_the_resource(ray_start):
    """vLLM's DP groups: GPU bundles, then a CPU bundle for the engine actor."""
    ray = ray_start
    api = pg_api()

    @ray.remote(num_cpus=1)
    class Engine:
        def where(self):
            import ray as r

            return r.get_runtime_context().get_placement_group_id(), r.get_gpu_ids()

    pg = api.placement_group(
        [{"GPU": 1, "node:127.0.0.1": 0.001}] * 2 + [{"CPU": 1, "node:127.0.0.1": 0.001}], strategy="STRICT_PACK"
    )
    assert pg.wait(10)
    e = Engine.options(scheduling_strategy=pg_strategy(pg, -1)).remote()
    pg_hex, gpus = ray.get(e.where.remote(), timeout=10)
    assert pg_hex == pg.id.hex() and gpus == []
    # the CPU bundle is taken; a second 1-CPU actor has nowhere to go
    e2 = Engine.options(scheduling_strategy=pg_strategy(pg, -1)).remote()
    assert ray.wait([e2.where.remote()], timeout=0.3)[0] == []
    assert ray.available_resources()["CPU"] == 7.0


# --- charging against bundles ---


def test_bundle_hosts_only_what_it_holds(ray_start, beamd):
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)
    pg = api.placement_group([{"GPU": 1}])
    assert pg.wait(10)
    first = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    assert ray.get(first.ping.remote(), timeout=10) == "pong"
    # actors in a group are charged to its bundle, not to the node's free pool
    assert ray.available_resources()["GPU"] == 3.0
    second = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    ref = second.ping.remote()
    assert ray.wait([ref], timeout=0.3)[0] == []
    states = {a["actor_id"]: a["state"] for a in beamd.status()["actors"]}
    assert states[first._actor_id.hex()] == "ALIVE"
    assert states[second._actor_id.hex()] == "PENDING_CREATION"
    # the node still has 3 free GPUs; the second actor must not take one of them
    assert ray.available_resources()["GPU"] == 3.0
    ray.kill(first)
    assert ray.get(ref, timeout=10) == "pong"


@pytest.mark.ray_compat
def test_actor_bigger_than_every_bundle_is_refused(ray_start):
    """As Ray: an actor no bundle can hold raises ValueError at .remote()
    (it used to stay pending on beam)."""
    ray = ray_start
    api = pg_api()

    @ray.remote(num_cpus=0, num_gpus=2)
    class Big:
        def ping(self):
            return 1

    pg = api.placement_group([{"GPU": 1}, {"GPU": 1}])
    assert pg.wait(10)
    with pytest.raises(ValueError, match="cannot fit into any bundles for the placement group"):
        Big.options(scheduling_strategy=pg_strategy(pg, -1)).remote()


def test_bundle_index_minus_one_picks_a_bundle_with_room(ray_start, beamd):
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)
    pg = api.placement_group([{"GPU": 1}, {"GPU": 1}])
    assert pg.wait(10)
    a = Probe.options(scheduling_strategy=pg_strategy(pg, -1)).remote()
    b = Probe.options(scheduling_strategy=pg_strategy(pg)).remote()  # -1 is the default
    ia, ib = ray.get([a.info.remote(), b.info.remote()], timeout=10)
    assert len(ia["gpus"]) == 1 and len(ib["gpus"]) == 1 and ia["gpus"] != ib["gpus"]
    c = Probe.options(scheduling_strategy=pg_strategy(pg, -1)).remote()
    ref = c.ping.remote()
    assert ray.wait([ref], timeout=0.3)[0] == []
    ray.kill(b)
    info = ray.get(c.info.remote(), timeout=10)
    assert info["gpus"] == ib["gpus"]


@pytest.mark.ray_compat
def test_bundle_index_out_of_range_raises(ray_start):
    ray = ray_start
    api = pg_api()
    Probe = _make_probe(ray)
    pg = api.placement_group([{"GPU": 1}])
    for index in (1, 5, -2):
        with pytest.raises(ValueError):
            Probe.options(scheduling_strategy=pg_strategy(pg, index)).remote()


@pytest.mark.parametrize("capture", [True, False])
def test_child_actors_and_capture(ray_start, capture):
    """An actor placed with placement_group_capture_child_tasks=True puts the
    actors it creates (with no strategy of their own) in its group, as vLLM's
    V1 executor expects; without it they go to the node."""
    ray = ray_start
    api = pg_api()
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_cpus=0, num_gpus=1)
    class Child:
        def where(self):
            import ray as r

            return r.get_runtime_context().get_placement_group_id()

    @ray.remote(num_cpus=0, num_gpus=1)
    class Parent:
        def spawn(self):
            import ray as r
            from ray.util import get_current_placement_group

            self.child = Child.remote()
            return (
                r.get(self.child.where.remote(), timeout=10),
                get_current_placement_group().id.hex(),
                r.get_runtime_context().should_capture_child_tasks_in_placement_group,
            )

    pg = api.placement_group([{"GPU": 1}, {"GPU": 1}])
    assert pg.wait(10)
    parent = Parent.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=capture
        )
    ).remote()
    child_pg, parent_pg, captures = ray.get(parent.spawn.remote(), timeout=20)
    assert parent_pg == pg.id.hex()
    assert captures is capture
    if capture:
        assert child_pg == pg.id.hex()
        assert ray.available_resources()["GPU"] == 2.0  # both in the group's bundles
    else:
        assert child_pg is None
        assert ray.available_resources()["GPU"] == 1.0  # the child took a node GPU


# --- fractional GPUs ---


@pytest.mark.ray_compat
def test_half_gpu_actors_share_a_whole_gpu_bundle(ray_start):
    ray = ray_start
    api = pg_api()

    @ray.remote(num_cpus=0, num_gpus=0.5)
    class Half:
        def info(self):
            import ray as r

            return [str(g) for g in r.get_gpu_ids()], os.environ.get("CUDA_VISIBLE_DEVICES")

        def ping(self):
            return 1

    pg = api.placement_group([{"GPU": 1}])
    assert pg.wait(10)
    x, y = (Half.options(scheduling_strategy=pg_strategy(pg, 0)).remote() for _ in range(2))
    (gx, cx), (gy, cy) = ray.get([x.info.remote(), y.info.remote()], timeout=10)
    assert len(gx) == 1 and gx == gy
    assert cx == cy == gx[0]
    third = Half.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    assert ray.wait([third.ping.remote()], timeout=0.3)[0] == []
    assert ray.available_resources()["GPU"] == 3.0


@pytest.mark.ray_compat
def test_half_gpu_bundles(ray_start):
    ray = ray_start
    api = pg_api()

    @ray.remote(num_cpus=0, num_gpus=0.5)
    class Half:
        def gpus(self):
            import ray as r

            return [str(g) for g in r.get_gpu_ids()]

    @ray.remote(num_cpus=0, num_gpus=1)
    class Whole:
        def ping(self):
            return 1

    pg = api.placement_group([{"GPU": 0.5}, {"GPU": 0.5}], strategy="PACK")
    assert pg.wait(10)
    assert api.placement_group_table(pg)["bundles"] == {0: {"GPU": 0.5}, 1: {"GPU": 0.5}}
    assert ray.available_resources()["GPU"] == 3.0
    hs = [Half.options(scheduling_strategy=pg_strategy(pg, i)).remote() for i in range(2)]
    g0, g1 = ray.get([h.gpus.remote() for h in hs], timeout=10)
    assert len(g0) == 1 and len(g1) == 1
    # a whole GPU never fits a half-GPU bundle: refused at .remote(), as Ray
    with pytest.raises(ValueError, match="cannot fit into any bundles for the placement group"):
        Whole.options(scheduling_strategy=pg_strategy(pg, 0)).remote()


# --- node: pinning ---


def test_node_ip_resource_pins_the_bundle(ray_start):
    ray = ray_start
    api = pg_api()
    node_id = ray.get_runtime_context().get_node_id()
    here = api.placement_group([{"GPU": 1, f"node:{IP}": 0.001}, {"GPU": 1}])
    assert here.wait(10)
    assert api.placement_group_table(here)["bundles_to_node_id"] == {0: node_id, 1: node_id}
    avail = ray.available_resources()
    assert avail[f"node:{IP}"] == pytest.approx(0.999)
    elsewhere = api.placement_group([{"GPU": 1, "node:10.9.9.9": 0.001}])
    assert elsewhere.wait(0.2) is False
    assert api.placement_group_table(elsewhere)["state"] == "PENDING"
    api.remove_placement_group(here)
    assert wait_until(lambda: ray.available_resources()[f"node:{IP}"] == 1.0)


# --- handles across processes ---


@pytest.mark.ray_compat
def test_handle_pickles_and_works_inside_an_actor(ray_start):
    ray = ray_start
    api = pg_api()
    pg = api.placement_group([{"GPU": 1}, {"CPU": 2}], strategy="PACK", name="shared-pg")
    assert pg.wait(10)
    copy = pickle.loads(pickle.dumps(pg))
    assert copy == pg and hash(copy) == hash(pg) and copy.bundle_specs == pg.bundle_specs
    deep = copy_module.deepcopy(pg)  # VllmConfig, holding the group, is deep-copied per DP rank
    assert deep == pg and deep.bundle_specs == pg.bundle_specs and deep.wait(1)

    @ray.remote(num_cpus=0)
    class Reader:
        def read(self, handle):
            import importlib

            p = importlib.import_module("ray.util.placement_group")
            fresh = p.PlacementGroup(handle.id)  # no cached bundles: asks the daemon
            return {
                "specs": handle.bundle_specs,
                "fresh_specs": fresh.bundle_specs,
                "count": fresh.bundle_count,
                "state": p.placement_group_table(handle)["state"],
                "by_name": p.get_placement_group("shared-pg") == handle,
                "ready": handle.wait(5),
                "current": p.get_current_placement_group(),
            }

    r = Reader.remote()
    got = ray.get(r.read.remote(pg), timeout=10)
    assert got["specs"] == [{"GPU": 1.0}, {"CPU": 2.0}]
    assert got["fresh_specs"] == got["specs"] and got["count"] == 2
    assert got["state"] == "CREATED"
    assert got["by_name"] and got["ready"]
    assert got["current"] is None  # the reader was not placed in a group
    assert api.get_placement_group("shared-pg") == pg


@pytest.mark.ray_compat
def test_current_placement_group(ray_start):
    ray = ray_start
    api = pg_api()
    assert api.get_current_placement_group() is None
    assert ray.get_runtime_context().get_placement_group_id() is None
    pg = api.placement_group([{"GPU": 1}])
    assert pg.wait(10)

    @ray.remote(num_cpus=0, num_gpus=1)
    class Inside:
        def current(self):
            from ray.util import get_current_placement_group

            cur = get_current_placement_group()
            return cur, cur.bundle_specs, ray.get_runtime_context().get_placement_group_id()

    a = Inside.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    cur, specs, pg_hex = ray.get(a.current.remote(), timeout=10)
    assert cur == pg
    assert specs == [{"GPU": 1.0}]
    assert pg_hex == pg.id.hex()


def test_group_used_from_another_driver(ray_start):
    """A handle pickled into a separate driver (vLLM hands its group to
    spawned processes) reads the table and schedules into it."""
    ray = ray_start
    api = pg_api()
    pg = api.placement_group([{"GPU": 1}, {"GPU": 1}])
    assert pg.wait(10)
    code = (
        "import os, pickle, ray\n"
        "from ray.util.placement_group import placement_group_table\n"
        "from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as S\n"
        "ray.init()\n"
        "pg = pickle.loads(bytes.fromhex(os.environ['PG']))\n"
        "@ray.remote(num_cpus=0, num_gpus=1)\n"
        "class W:\n"
        "    def gpus(self):\n"
        "        return ray.get_gpu_ids()\n"
        "w = W.options(scheduling_strategy=S(pg, 1)).remote()\n"
        "print(placement_group_table(pg)['state'], len(ray.get(w.gpus.remote(), timeout=10)))\n"
    )
    out = run_driver(code, env={"PG": pickle.dumps(pg).hex()})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["CREATED", "1"]
    # the other driver's actor is gone with it; the group is still ours
    assert api.placement_group_table(pg)["state"] == "CREATED"
    assert wait_until(lambda: ray.available_resources()["GPU"] == 2.0)


@pytest.mark.ray_compat
def test_stats_of_a_group_removed_while_pending(ray_start):
    api = pg_api()
    pg = api.placement_group([{"GPU": 16}])
    assert pg.wait(0.05) is False
    api.remove_placement_group(pg)
    stats = api.placement_group_table(pg)["stats"]
    assert 0.0 <= stats["end_to_end_creation_latency_ms"] < 60_000
    assert 0.0 <= stats["scheduling_latency_ms"] < 60_000


@pytest.mark.ray_compat
def test_stats_of_a_placed_group(ray_start):
    api = pg_api()
    pg = api.placement_group([{"GPU": 1}])
    assert pg.wait(10)
    stats = api.placement_group_table(pg)["stats"]
    assert 0.0 <= stats["end_to_end_creation_latency_ms"] < 60_000
    assert stats["scheduling_attempt"] >= 1
    assert stats["scheduling_state"] == "FINISHED"


# --- the table ---


def test_placement_group_table_shapes(ray_start):
    ray = ray_start
    api = pg_api()
    node_id = ray.get_runtime_context().get_node_id()
    placed = api.placement_group([{"GPU": 1, "CPU": 0.5}, {"CPU": 1}], strategy="SPREAD", name="shapes")
    assert placed.wait(10)
    pending = api.placement_group([{"GPU": 16}])
    t = api.placement_group_table(placed)
    assert {"placement_group_id", "name", "bundles", "bundles_to_node_id", "strategy", "state", "stats"} <= set(t)
    assert HEX36.match(t["placement_group_id"]) and t["placement_group_id"] == placed.id.hex()
    assert t["name"] == "shapes"
    assert t["bundles"] == {0: {"GPU": 1.0, "CPU": 0.5}, 1: {"CPU": 1.0}}
    for res in t["bundles"].values():
        assert all(isinstance(k, str) and isinstance(v, float) for k, v in res.items())
    assert set(t["bundles_to_node_id"]) == {0, 1}
    assert all(HEX56.match(v) and v == node_id for v in t["bundles_to_node_id"].values())
    assert t["strategy"] == "SPREAD" and t["state"] == "CREATED"
    assert isinstance(t["stats"], dict)
    assert {"end_to_end_creation_latency_ms", "scheduling_attempt", "scheduling_state"} <= set(t["stats"])
    p = api.placement_group_table(pending)
    assert p["state"] == "PENDING" and set(p["bundles_to_node_id"].values()) == {""} and p["name"] == ""
    everything = api.placement_group_table()
    assert set(everything) == {placed.id.hex(), pending.id.hex()}
    assert everything[placed.id.hex()] == t
    assert pending.bundle_count == 1 and pending.bundle_specs == [{"GPU": 16.0}]


# --- lifetimes ---


def test_driver_exit_removes_its_groups(ray_start, beamd):
    ray = ray_start
    code = (
        "import ray\n"
        "from ray.util.placement_group import placement_group\n"
        "ray.init()\n"
        "pg = placement_group([{'GPU': 2}])\n"
        "assert pg.wait(10)\n"
        "keep = placement_group([{'GPU': 1}], name='kept', lifetime='detached')\n"
        "assert keep.wait(10)\n"
        "print(pg.id.hex(), keep.id.hex())\n"
    )
    out = run_driver(code)
    assert out.returncode == 0, out.stderr
    gone, kept = out.stdout.split()

    def states():
        return {g["placement_group_id"]: g["state"] for g in beamd.status()["placement_groups"]}

    assert wait_until(lambda: states().get(gone) == "REMOVED")
    assert states()[kept] == "CREATED"  # detached outlives its driver
    assert wait_until(lambda: ray.available_resources()["GPU"] == 3.0)
    api = pg_api()
    pg = api.get_placement_group("kept")
    assert pg.id.hex() == kept
    api.remove_placement_group(pg)
    assert wait_until(lambda: _totals_back(ray))


def test_group_made_by_an_actor_outlives_the_actor(ray_start, beamd):
    ray = ray_start
    api = pg_api()

    @ray.remote(num_cpus=0)
    class Launcher:
        def make(self):
            from ray.util import placement_group

            pg = placement_group([{"GPU": 1}], name="from-actor")
            assert pg.wait(10)
            return pg

    launcher = Launcher.remote()
    pg = ray.get(launcher.make.remote(), timeout=10)
    assert api.placement_group_table(pg)["state"] == "CREATED"
    ray.kill(launcher)
    assert wait_until(lambda: all(a["state"] == "DEAD" for a in beamd.status()["actors"]))
    assert wait_until(lambda: api.placement_group_table(pg)["state"] != "CREATED", timeout=0.5) is False
    # and the driver still schedules into it
    Probe = _make_probe(ray)
    p = Probe.options(scheduling_strategy=pg_strategy(pg, 0)).remote()
    assert ray.get(p.ping.remote(), timeout=10) == "pong"


def test_group_made_by_an_actor_goes_with_the_driver(beamd):
    code = (
        "import ray\n"
        "ray.init()\n"
        "@ray.remote(num_cpus=0)\n"
        "class Launcher:\n"
        "    def make(self):\n"
        "        from ray.util import placement_group\n"
        "        pg = placement_group([{'GPU': 1}])\n"
        "        assert pg.wait(10)\n"
        "        return pg.id.hex()\n"
        "l = Launcher.remote()\n"
        "print(ray.get(l.make.remote(), timeout=10))\n"
    )
    out = run_driver(code)
    assert out.returncode == 0, out.stderr
    hex_id = out.stdout.strip()
    assert wait_until(lambda: _pg_status_hex(beamd, hex_id) == "REMOVED")
    assert wait_until(lambda: beamd.status()["resources_available"]["GPU"] == 4.0)


def test_shutdown_removes_groups(beamd):
    import ray

    api = pg_api()
    ray.init()
    pg = api.placement_group([{"GPU": 4}])
    assert pg.wait(10)
    hex_id = pg.id.hex()
    ray.shutdown()
    assert wait_until(lambda: _pg_status_hex(beamd, hex_id) == "REMOVED")
    assert beamd.status()["resources_available"]["GPU"] == 4.0


def _pg_status_hex(beamd, hex_id):
    for g in beamd.status()["placement_groups"]:
        if g["placement_group_id"] == hex_id:
            return g["state"]
    return None


# --- cluster state ---


def test_state_functions_shapes(ray_start, beamd):
    ray = ray_start
    from ray._private import state
    from ray.util.state import list_nodes

    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    assert HEX56.match(node_id)

    total = ray.cluster_resources()
    assert total["CPU"] == 8.0 and total["GPU"] == 4.0
    assert total[f"node:{IP}"] == 1.0 and total["node:__internal_head__"] == 1.0
    assert total["memory"] > 0 and total["object_store_memory"] > 0
    assert all(isinstance(v, float) for v in total.values())
    assert ray.available_resources() == total

    for per_node in (state.available_resources_per_node(), state.total_resources_per_node()):
        assert list(per_node) == [node_id]
        res = per_node[node_id]
        assert res[f"node:{IP}"] == 1.0 and res["node:__internal_head__"] == 1.0
        assert res["GPU"] == 4.0 and res["CPU"] == 8.0
        # vLLM's DP manager: exactly one node:<ip> key besides the head's
        assert [k for k in res if k.startswith("node:") and k != "node:__internal_head__"] == [f"node:{IP}"]

    (n,) = ray.nodes()
    for key in (
        "NodeID",
        "Alive",
        "NodeManagerAddress",
        "NodeManagerHostname",
        "NodeManagerPort",
        "NodeName",
        "Resources",
        "Labels",
        "alive",
    ):
        assert key in n, key
    assert n["NodeID"] == node_id and n["Alive"] is True and n["alive"] is True
    assert n["NodeManagerAddress"] == IP
    assert isinstance(n["NodeManagerPort"], int)
    assert n["Resources"] == total
    assert isinstance(n["Labels"], dict)

    (ln,) = list_nodes()
    assert ln.node_id == node_id and ln.node_ip == IP
    assert ln.is_head_node is True and ln.state == "ALIVE"
    assert ln.resources_total == total

    ip = ray.util.get_node_ip_address()
    assert ip == n["NodeManagerAddress"] == IP
    assert f"node:{ip}" in total

    # resources in use show in available, per node and in total
    pg = pg_api().placement_group([{"GPU": 1, "CPU": 2}])
    assert pg.wait(10)
    assert ray.available_resources()["GPU"] == 3.0
    assert state.available_resources_per_node()[node_id]["CPU"] == 6.0
    assert state.total_resources_per_node()[node_id]["CPU"] == 8.0
    assert ray.cluster_resources() == total


def test_state_inside_an_actor(ray_start):
    ray = ray_start
    node_id = ray.get_runtime_context().get_node_id()

    @ray.remote(num_cpus=0)
    class Looker:
        def look(self):
            import ray as r
            from ray._private import state
            from ray.util import get_node_ip_address

            return (
                r.get_runtime_context().get_node_id(),
                get_node_ip_address(),
                [n["NodeID"] for n in r.nodes()],
                list(state.available_resources_per_node()),
            )

    looker = Looker.remote()  # (a method holds its handle weakly, as Ray's)
    nid, ip, nodes, per_node = ray.get(looker.look.remote(), timeout=10)
    assert nid == node_id and nodes == [node_id] and per_node == [node_id]
    assert ip == IP


def test_custom_resources_in_state_and_bundles(monkeypatch):
    import ray

    d = Beamd(num_gpus=0, num_cpus=2, extra=["--resource", "accel=2"])
    monkeypatch.setenv("BEAM_SOCKET", d.socket)
    try:
        ray.init()
        api = pg_api()
        assert ray.cluster_resources()["accel"] == 2.0
        assert "GPU" not in ray.cluster_resources() or ray.cluster_resources()["GPU"] == 0
        pg = api.placement_group([{"accel": 1}, {"accel": 1}], strategy="STRICT_PACK")
        assert pg.wait(10)
        assert "accel" not in ray.available_resources()  # all taken: Ray leaves out zero entries
        over = api.placement_group([{"accel": 1}])
        assert over.wait(0.2) is False
        api.remove_placement_group(pg)
        assert over.wait(10)
    finally:
        ray.shutdown()
        assert d.stop() == 0


# --- the flow vLLM runs ---


@pytest.mark.parametrize("noset", [False, True])
def test_vllm_shaped_flow(ray_start, noset):
    """initialize_ray_cluster + RayExecutorV2 on one node with 4 GPUs."""
    ray = ray_start
    from ray._private.state import available_resources_per_node
    from ray.util import placement_group_table
    from ray.util.placement_group import PlacementGroup  # noqa: F401 (imported by vLLM)
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    world = 4
    ip = ray.util.get_node_ip_address()
    driver_node = ray.get_runtime_context().get_node_id()
    assert ray.util.get_current_placement_group() is None
    assert available_resources_per_node()[driver_node]["GPU"] >= 1
    specs = [{"GPU": 1.0} for _ in range(world)]
    specs[0][f"node:{ip}"] = 0.001
    pg = ray.util.placement_group(specs, strategy="PACK")
    ready, _ = ray.wait([pg.ready()], timeout=10)
    assert ready
    ray.get(pg.ready(), timeout=0)  # must not raise once placed

    # _verify_bundles
    table = placement_group_table(pg)
    node_ids = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    bundle_nodes = table["bundles_to_node_id"]
    assert set(bundle_nodes) == set(table["bundles"]) == set(range(world))
    assert driver_node in bundle_nodes.values()
    assert all(node_ids[n] == ip for n in bundle_nodes.values())

    # get_bundles_sorted_by_node
    bundles = [(i, bundle_nodes[i], node_ids[bundle_nodes[i]]) for i, b in enumerate(pg.bundle_specs) if b.get("GPU")]
    bundles.sort(key=lambda t: (t[1] != driver_node, t[1]))
    assert [b[0] for b in bundles] == list(range(world))

    env = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}} if noset else {}

    class RayWorkerProc:
        def __init__(self, rank):
            self.rank = rank

        def get_node_and_gpu_ids(self):
            import ray as r
            from ray.util import get_node_ip_address

            ctx = r.get_runtime_context()
            return (
                ctx.get_node_id(),
                [int(x) for x in ctx.get_accelerator_ids()["GPU"]],
                os.environ.get("CUDA_VISIBLE_DEVICES"),
                get_node_ip_address(),
                self.rank,
            )

    workers = []
    for rank, (idx, _node, _ip) in enumerate(bundles):
        ss = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=idx)
        workers.append(
            ray.remote(RayWorkerProc)
            .options(name=f"vllm_Worker_test_TP{rank}", num_cpus=0, num_gpus=1, scheduling_strategy=ss, runtime_env=env)
            .remote(rank=rank)
        )
    infos = ray.get([w.get_node_and_gpu_ids.remote() for w in workers], timeout=20)
    assert [i[4] for i in infos] == list(range(world))
    assert all(i[0] == driver_node and i[3] == ip for i in infos)
    assert all(i[0] in bundle_nodes.values() for i in infos)
    ordered = sorted(infos, key=lambda i: (i[0], i[1]))
    gpu_ids = [i[1] for i in ordered]
    assert all(len(g) == 1 for g in gpu_ids)
    flat = [g[0] for g in gpu_ids]
    assert len(set(flat)) == world and sorted(flat) == [0, 1, 2, 3]
    for node, gpus, cvd, _ip, _rank in infos:
        if noset:
            assert cvd == os.environ.get("CUDA_VISIBLE_DEVICES")
        else:
            assert cvd == str(gpus[0])
    assert ray.available_resources().get("GPU", 0.0) == 0.0

    # the monitor's view: nothing has died
    runs = [w.get_node_and_gpu_ids.remote() for w in workers]
    ray.get(runs, timeout=10)
    for w in workers:
        ray.kill(w)
    # the group outlives its actors (vLLM never removes it): its GPUs stay reserved
    assert api_state(pg) == "CREATED"
    assert wait_until(lambda: ray.available_resources().get("GPU", 0.0) == 0.0)


def api_state(pg):
    return pg_api().placement_group_table(pg)["state"]


def test_ray_util_reachable_after_plain_import():
    """Ray's __init__ imports ray.util; vLLM calls ray.util.get_node_ip_address()
    inside workers after a plain `import ray`."""
    out = run_driver("import ray\nprint(ray.util.get_node_ip_address is not None)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


# --- two nodes: a head and a member on this machine ---


@pytest.fixture
def two_nodes(monkeypatch, tmp_path):
    """A head (127.0.0.1) and a member (127.0.0.2), 2 GPUs and 4 CPUs each;
    the driver talks to the head."""
    import socket as _socket

    import ray
    from beamkit.procs import beam_processes

    s = _socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    token = str(tmp_path / "token")
    head = Beamd(num_gpus=2, num_cpus=4, extra=["--head", "--port", str(port), "--token-file", token])
    member = None
    try:
        member = Beamd(
            num_gpus=2,
            num_cpus=4,
            extra=["--node-ip", "127.0.0.2", "--address", f"127.0.0.1:{port}", "--token-file", token],
        )
        monkeypatch.setenv("BEAM_SOCKET", head.socket)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        ray.init()
        assert wait_until(lambda: sum(n["Alive"] for n in ray.nodes()) == 2), head.read_log()[-2000:]
        yield ray
    finally:
        ray.shutdown()
        for d in (member, head):
            if d is None:
                continue
            rc = d.stop()
            left = beam_processes(d.socket)
            for pid in left:
                os.kill(pid, 9)
            assert rc == 0 and not left, d.read_log()[-2000:]


def test_two_nodes_strategies_and_node_ids(two_nodes):
    ray = two_nodes
    api = pg_api()
    from ray._private import state

    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    assert sorted(nodes.values()) == ["127.0.0.1", "127.0.0.2"]
    per_node = state.available_resources_per_node()
    assert set(per_node) == set(nodes)
    for nid, ip in nodes.items():
        assert per_node[nid][f"node:{ip}"] == 1.0 and per_node[nid]["GPU"] == 2.0
    assert ray.cluster_resources()["GPU"] == 4.0

    @ray.remote(num_cpus=0, num_gpus=1)
    class Where:
        def where(self):
            import ray as r
            from ray.util import get_node_ip_address

            return r.get_runtime_context().get_node_id(), get_node_ip_address(), r.get_gpu_ids()

    spread = api.placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_SPREAD")
    assert spread.wait(10)
    placed = api.placement_group_table(spread)["bundles_to_node_id"]
    assert set(placed.values()) == set(nodes)
    actors = [Where.options(scheduling_strategy=pg_strategy(spread, i)).remote() for i in range(2)]
    for i, (nid, ip, gpus) in enumerate(ray.get([a.where.remote() for a in actors], timeout=20)):
        assert nid == placed[i] and ip == nodes[nid] and len(gpus) == 1
    three = api.placement_group([{"GPU": 1}] * 3, strategy="STRICT_SPREAD")
    assert three.wait(0.3) is False
    api.remove_placement_group(three)

    # pinned to the member by its node: resource
    member = [nid for nid, ip in nodes.items() if ip == "127.0.0.2"][0]
    pinned = api.placement_group([{"GPU": 1, "node:127.0.0.2": 0.001}])
    assert pinned.wait(10)
    assert api.placement_group_table(pinned)["bundles_to_node_id"] == {0: member}

    # one GPU left on the head, none on the member: PACK and STRICT_PACK of 2 wait
    for strategy in ("PACK", "STRICT_PACK"):
        waiting = api.placement_group([{"GPU": 1}] * 2, strategy=strategy)
        assert waiting.wait(0.2) is False
        api.remove_placement_group(waiting)  # else it takes the GPUs freed below
    api.remove_placement_group(pinned)
    api.remove_placement_group(spread)
    for a in actors:
        ray.kill(a)
    # all four free again: STRICT_PACK of 3 never fits a 2-GPU node; PACK of 3 spans both
    assert wait_until(lambda: ray.available_resources().get("GPU", 0) == 4.0)
    assert api.placement_group([{"GPU": 1}] * 3, strategy="STRICT_PACK").wait(0.3) is False
    span = api.placement_group([{"GPU": 1}] * 3, strategy="PACK")
    assert span.wait(10)
    where = list(api.placement_group_table(span)["bundles_to_node_id"].values())
    assert sorted(where.count(n) for n in nodes) == [1, 2]
