# SPDX-License-Identifier: Apache-2.0
"""Actor restarts and task retries as Ray 2.43 runs them (issue 24):
``max_restarts`` (N, -1) restarts an actor whose process dies (SIGKILL,
``os._exit``) or that ``ray.kill(a, no_restart=False)`` kills, with its
constructor's arguments, its resources and its name; calls made meanwhile
wait for the new instance; a call the dead process was running fails unless
``max_task_retries`` sends it again; once the restarts are spent,
``ActorDiedError``. Tasks: ``max_retries`` (default 3) runs a task whose
worker died again, then ``WorkerCrashedError``.

The tests marked ray_compat use only Ray's public API and pass on real Ray
2.43 too (scripts/test_real_ray.sh tests/python/test_restarts.py). Nothing
here sleeps for a result: each waits for a file, a pid or an answer.
"""

import os
import signal
import sys
import time

import pytest

import ray
from beamkit.procs import wait_file, wait_gone, wait_until

ON_RAY = getattr(ray, "__commit__", "") != "beam"
beam_only = pytest.mark.skipif(ON_RAY, reason="checks beam itself")

# a hang guard for a worker's start, not a figure the test relies on
WORKER_START_S = 120.0


def _starts(d):
    return len([f for f in os.listdir(d) if f.startswith("start-")])


@ray.remote
class Counter:
    """Counts its calls; records each construction in folder d (when given)
    and, from construction number `gate_from` on, waits for d/gate first."""

    def __init__(self, d=None, gate_from=None):
        self.n = 0
        if d is not None:
            k = _starts(d)
            with open(os.path.join(d, f"start-{k}"), "w") as f:
                f.write(str(os.getpid()))
            if gate_from is not None and k >= gate_from:
                while not os.path.exists(os.path.join(d, "gate")):
                    time.sleep(0.01)

    def pid(self):
        return os.getpid()

    def incr(self):
        self.n += 1
        return self.n

    def gpus(self):
        return len(ray.get_gpu_ids())

    def group(self):
        from ray.util import get_current_placement_group

        g = get_current_placement_group()
        return g.id.hex() if g else None

    def block(self, d):
        """Says it runs (d/running), then never returns."""
        open(os.path.join(d, "running"), "w").close()
        while True:
            time.sleep(1)

    def quit(self, code):
        sys.exit(code)

    def exit_first(self, d):
        """Counts its tries in d; the first one ends the process."""
        n = len([f for f in os.listdir(d) if f.startswith("try-")])
        open(os.path.join(d, f"try-{n}"), "w").close()
        if n == 0:
            os._exit(1)
        return n + 1


def _kill(pid):
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, WORKER_START_S)


def _next_pid(actor, old):
    """The pid of the actor's next instance. A call made before the death is
    seen may fail (on Ray, ActorUnavailableError): it is made again until one
    is answered by a process other than old."""
    deadline = time.monotonic() + WORKER_START_S
    while time.monotonic() < deadline:
        try:
            pid = ray.get(actor.pid.remote(), timeout=WORKER_START_S)
        except ray.exceptions.ActorDiedError:
            raise
        except ray.exceptions.RayActorError:
            time.sleep(0.02)
            continue
        if pid != old:
            return pid
    pytest.fail("the actor did not come back")


def _dead(actor, pid):
    """Waits until the actor's calls raise ActorDiedError; True then, False if
    a process other than pid answers (it was restarted). Until then a call
    may still be answered by pid (Ray's ray.kill is asynchronous) or raise
    ActorUnavailableError (Ray: made before the death is seen)."""
    deadline = time.monotonic() + WORKER_START_S
    while time.monotonic() < deadline:
        try:
            answer = ray.get(actor.pid.remote(), timeout=WORKER_START_S)
        except ray.exceptions.ActorDiedError:
            return True
        except ray.exceptions.RayActorError:
            answer = pid
        if answer != pid:
            return False
        time.sleep(0.02)
    return False


@pytest.mark.ray_compat
def test_an_actor_survives_max_restarts_sigkills_then_dies(ray_start):
    a = Counter.options(max_restarts=2).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    assert ray.get([a.incr.remote(), a.incr.remote()]) == [1, 2]
    for _ in range(2):
        _kill(pid)
        new = _next_pid(a, pid)
        assert new != pid
        # the state is the constructor's again
        assert ray.get(a.incr.remote(), timeout=WORKER_START_S) == 1
        pid = new
    _kill(pid)
    assert _dead(a, pid)
    with pytest.raises(ray.exceptions.ActorDiedError) as e:
        ray.get(a.incr.remote(), timeout=WORKER_START_S)
    assert isinstance(e.value, ray.exceptions.RayActorError)
    assert not e.value.actor_init_failed


@pytest.mark.ray_compat
def test_max_restarts_minus_one_restarts_without_end(ray_start):
    a = Counter.options(max_restarts=-1).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    for _ in range(4):
        _kill(pid)
        pid = _next_pid(a, pid)
    assert ray.get(a.incr.remote(), timeout=WORKER_START_S) == 1
    ray.kill(a)
    assert _dead(a, pid)


@pytest.mark.ray_compat
def test_without_task_retries_calls_in_flight_or_made_while_restarting_fail(ray_start, tmp_path):
    d = str(tmp_path)
    # constructions from the second on wait for d/gate: the restart is held
    a = Counter.options(max_restarts=1, name="held").remote(d, 1)
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    running = a.block.remote(d)
    assert wait_file(os.path.join(d, "running"), WORKER_START_S)
    _kill(pid)
    # max_task_retries=0: the call the process was running fails, and so
    # does one made while the actor restarts (Ray 2.43: "The actor is
    # restarting"); the actor itself lives on
    with pytest.raises(ray.exceptions.ActorUnavailableError) as e:
        ray.get(running, timeout=WORKER_START_S)
    assert isinstance(e.value, ray.exceptions.RayActorError)
    assert not isinstance(e.value, ray.exceptions.ActorDiedError)
    assert wait_file(os.path.join(d, "start-1"), WORKER_START_S)  # being constructed again
    by_name = ray.get_actor("held")  # its name is kept through the restart
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(by_name.incr.remote(), timeout=WORKER_START_S)
    open(os.path.join(d, "gate"), "w").close()
    assert _next_pid(a, pid) != pid
    assert ray.get(a.incr.remote(), timeout=WORKER_START_S) == 1  # the refused call never ran
    ray.kill(a)


@pytest.mark.ray_compat
def test_with_task_retries_calls_made_while_restarting_wait_for_the_new_instance(ray_start, tmp_path):
    d = str(tmp_path)
    a = Counter.options(max_restarts=1, max_task_retries=-1, name="waits").remote(d, 1)
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    _kill(pid)
    assert wait_file(os.path.join(d, "start-1"), WORKER_START_S)  # held in its constructor
    calls = [a.incr.remote() for _ in range(3)]
    by_name = ray.get_actor("waits")
    assert ray.wait(calls, num_returns=3, timeout=0) == ([], calls)
    open(os.path.join(d, "gate"), "w").close()
    assert ray.get(calls, timeout=WORKER_START_S) == [1, 2, 3]
    assert ray.get(by_name.incr.remote(), timeout=WORKER_START_S) == 4
    assert ray.get(a.pid.remote()) != pid
    ray.kill(a)


@pytest.mark.ray_compat
def test_max_task_retries_runs_the_call_again_on_the_new_instance(ray_start, tmp_path):
    a = Counter.options(max_restarts=1, max_task_retries=1).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    # its first try ends the process; the second, on the restarted actor, answers
    assert ray.get(a.exit_first.remote(str(tmp_path)), timeout=WORKER_START_S) == 2
    assert len(os.listdir(tmp_path)) == 2
    assert ray.get(a.pid.remote(), timeout=WORKER_START_S) != pid
    ray.kill(a)


@pytest.mark.ray_compat
def test_without_task_retries_a_call_that_ends_the_process_fails(ray_start, tmp_path):
    a = Counter.options(max_restarts=1).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.exit_first.remote(str(tmp_path)), timeout=WORKER_START_S)
    assert len(os.listdir(tmp_path)) == 1  # not run again
    assert _next_pid(a, pid) != pid  # the actor itself was restarted
    ray.kill(a)


@pytest.mark.ray_compat
def test_sys_exit_0_ends_it_on_purpose_and_another_status_restarts_it(ray_start):
    a = Counter.options(max_restarts=2).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(a.quit.remote(3), timeout=WORKER_START_S)  # unexpected: restarted
    pid = _next_pid(a, pid)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(a.quit.remote(0), timeout=WORKER_START_S)  # on purpose (exit_actor()): not restarted, one left
    assert _dead(a, pid)


@pytest.mark.ray_compat
def test_kill_with_no_restart_false_restarts_and_kill_does_not(ray_start):
    a = Counter.options(max_restarts=1).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    ray.get(a.incr.remote())
    ray.kill(a, no_restart=False)
    assert wait_gone(pid, WORKER_START_S)
    pid = _next_pid(a, pid)
    assert ray.get(a.incr.remote(), timeout=WORKER_START_S) == 1
    # its one restart is spent: the next no_restart=False kill is for good
    ray.kill(a, no_restart=False)
    assert _dead(a, pid)
    b = Counter.options(max_restarts=-1).remote()
    pid_b = ray.get(b.pid.remote(), timeout=WORKER_START_S)
    ray.kill(b)  # no_restart=True: never restarted
    assert _dead(b, pid_b)
    with pytest.raises(ray.exceptions.ActorDiedError, match="ray.kill"):
        ray.get(b.incr.remote(), timeout=WORKER_START_S)


@pytest.mark.ray_compat
def test_a_named_actor_keeps_its_name_and_its_request(ray_start):
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([{"CPU": 1, "GPU": 1}])
    assert pg.wait(WORKER_START_S)
    a = Counter.options(
        name="kept",
        max_restarts=1,
        num_gpus=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
    ).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    _kill(pid)
    again = ray.get_actor("kept")
    new = _next_pid(again, pid)
    assert new != pid
    assert ray.get(a.pid.remote(), timeout=WORKER_START_S) == new
    assert ray.get(again.gpus.remote(), timeout=WORKER_START_S) == 1
    assert ray.get(again.group.remote(), timeout=WORKER_START_S) == pg.id.hex()
    ray.kill(a)
    assert _dead(a, new)
    remove_placement_group(pg)


@ray.remote
def exits_until(d, k, how):
    """Counts its tries in d; each of the first k ends its worker (os._exit,
    or sys.exit, which Ray 2.43 retries as well)."""
    n = len(os.listdir(d))
    open(os.path.join(d, f"try-{n}"), "w").close()
    if n < k:
        if how == "sys.exit":
            sys.exit(1)
        os._exit(1)
    return n


@pytest.mark.ray_compat
@pytest.mark.parametrize(
    "max_retries,k,tries,how",
    [
        (None, 3, 4, "os._exit"),
        (None, 4, 4, "os._exit"),
        (0, 1, 1, "os._exit"),
        (1, 1, 2, "os._exit"),
        (2, 0, 1, "os._exit"),
        (-1, 5, 6, "os._exit"),
        (None, 1, 2, "sys.exit"),
        (0, 1, 1, "sys.exit"),
    ],
    ids=[
        "default-3-enough",
        "default-3-spent",
        "0",
        "1-enough",
        "2-no-crash",
        "minus-1",
        "sys.exit-default",
        "sys.exit-0",
    ],
)
def test_a_task_whose_worker_dies_is_retried_max_retries_times(ray_start, tmp_path, max_retries, k, tries, how):
    f = exits_until if max_retries is None else exits_until.options(max_retries=max_retries)
    ref = f.remote(str(tmp_path), k, how)
    spent = max_retries is not None and 0 <= max_retries < k or max_retries is None and k > 3
    if spent:
        with pytest.raises(ray.exceptions.WorkerCrashedError):
            ray.get(ref, timeout=WORKER_START_S)
    else:
        assert ray.get(ref, timeout=WORKER_START_S) == k
    assert len(os.listdir(tmp_path)) == tries


@beam_only
def test_beam_shows_restarting_until_the_new_instance_is_alive(ray_start, beamd, tmp_path):
    from ray.util.state import list_actors

    d = str(tmp_path)
    a = Counter.options(max_restarts=1, max_task_retries=-1).remote(d, 1)  # calls wait for it
    hex_id = a._actor_id.hex()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)

    def state():
        return list_actors(filters=[("actor_id", "=", hex_id)])[0].state

    assert state() == "ALIVE"
    _kill(pid)
    assert wait_file(os.path.join(d, "start-1"), WORKER_START_S)  # held in its constructor
    assert state() == "RESTARTING"
    row = [x for x in beamd.status()["actors"] if x["actor_id"] == hex_id][0]
    assert row["state"] == "RESTARTING" and row["num_restarts"] == 1
    open(os.path.join(d, "gate"), "w").close()
    assert ray.get(a.incr.remote(), timeout=WORKER_START_S) == 1
    assert state() == "ALIVE"
    ray.kill(a)
    assert wait_until(lambda: state() == "DEAD", WORKER_START_S)


# --- across a cluster: the head restarts an actor whose worker runs on a member ---

ON_MEMBER = {"resources": {"node:127.0.0.2": 0.001}}  # the `cluster` fixture's member
HERE = os.path.dirname(os.path.abspath(__file__))


@beam_only
def test_an_actor_on_a_member_is_restarted_there(cluster):
    ray.init()  # the driver on the head
    a = Counter.options(max_restarts=1, max_task_retries=1, **ON_MEMBER).remote()
    node = ray.get_runtime_context().get_node_id()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    row = [x for x in cluster.head.status()["actors"] if x["actor_id"] == a._actor_id.hex()][0]
    assert row["node_id"] != node  # on the member
    ray.get(a.incr.remote())
    _kill(pid)
    new = _next_pid(a, pid)
    assert ray.get(a.incr.remote(), timeout=WORKER_START_S) == 1
    row = [x for x in cluster.head.status()["actors"] if x["actor_id"] == a._actor_id.hex()][0]
    assert row["node_id"] != node and row["num_restarts"] == 1 and row["pid"] == new
    _kill(new)
    assert _dead(a, new)


@beam_only
def test_a_members_own_driver_sees_its_local_actor_restart(cluster, tmp_path):
    """Calls between a member's driver and an actor on that member stay on
    the member (docs/DESIGN.md): the restart fails the local call in flight
    with ActorUnavailableError, and the local way serves the new instance."""
    from beamkit.daemon import driver_env, run_driver

    out = run_driver(
        """
        import os, signal, time
        import ray
        from test_restarts import Counter, ON_MEMBER, _next_pid
        ray.init()
        a = Counter.options(max_restarts=1, **ON_MEMBER).remote()
        pid = ray.get(a.pid.remote(), timeout=60)
        assert [ray.get(a.incr.remote()) for _ in range(20)] == list(range(1, 21))
        running = a.block.remote(d)
        while not os.path.exists(os.path.join(d, "running")):
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        try:
            ray.get(running, timeout=60)
            print("NO ERROR")
        except ray.exceptions.ActorUnavailableError:
            print("UNAVAILABLE")
        new = _next_pid(a, pid)
        print("COUNTS", [ray.get(a.incr.remote()) for _ in range(20)] == list(range(1, 21)), new != pid)
        """,
        driver_env(cluster.members[0], PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])),
        timeout=WORKER_START_S,
        names={"d": str(tmp_path)},
        check=True,
    )
    assert "UNAVAILABLE" in out.stdout and "COUNTS True True" in out.stdout, out.stdout + out.stderr


@beam_only
def test_an_actor_whose_node_dies_restarts_on_a_live_node(cluster):
    """As Ray's GCS does: the member is SIGKILLed (a crashed machine), the
    head restarts the actor elsewhere; one with no restart left dies with
    "its node has died"."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init()  # the driver on the head
    head = ray.get_runtime_context().get_node_id()
    member = cluster.node_id(cluster.members[0])
    there = NodeAffinitySchedulingStrategy(member, soft=True)
    a = Counter.options(max_restarts=1, scheduling_strategy=there).remote()
    b = Counter.options(scheduling_strategy=there).remote()
    pid = ray.get(a.pid.remote(), timeout=WORKER_START_S)
    ray.get(b.pid.remote(), timeout=WORKER_START_S)
    assert ray.get(a.incr.remote()) == 1
    cluster.members[0].expect_signal = True
    cluster.members[0].kill9()
    assert wait_gone(pid, WORKER_START_S)
    new = _next_pid(a, pid)
    assert ray.get(a.incr.remote(), timeout=WORKER_START_S) == 1
    row = [x for x in cluster.head.status()["actors"] if x["actor_id"] == a._actor_id.hex()][0]
    assert row["node_id"] == head and row["pid"] == new and row["num_restarts"] == 1
    with pytest.raises(ray.exceptions.ActorDiedError, match="node has died"):
        ray.get(b.pid.remote(), timeout=WORKER_START_S)
