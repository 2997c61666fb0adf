# SPDX-License-Identifier: Apache-2.0
"""Ray Compiled Graphs through the Ray API only (ray.dag, CompiledDAGRef,
ray.get), against a real beamd and real workers. Every test here is marked
``ray_compat``: it uses nothing beam-specific, so it runs unchanged on real
Ray 2.43 too (there the fixture starts a local Ray instead of a beamd):

    env -u PYTHONPATH /opt/ray-venv/bin/python -m pytest -q -m ray_compat tests/python/test_cgraph_api.py
"""

import copy
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.ray_compat


def _on_beam():
    import ray

    return getattr(ray, "__commit__", "") == "beam"


@pytest.fixture
def cg_ray(request):
    """ray.init() against a fresh beamd on beam; a local Ray elsewhere."""
    import ray

    if _on_beam():
        request.getfixturevalue("ray_start")
        yield ray
        return
    # Ray's workers import this module by name: give them its folder
    here = os.path.dirname(os.path.abspath(__file__))
    ray.init(num_cpus=16, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": here}})
    try:
        yield ray
    finally:
        ray.shutdown()


class Stage:
    """A pipeline stage: adds its rank to the value; "raise" raises ValueError,
    ("sleep", s) sleeps; an Event lets an ordinary call unblock a graph call."""

    def __init__(self, rank=0):
        self.rank = rank
        self.event = threading.Event()
        self.calls = 0

    def step(self, x):
        self.calls += 1
        if isinstance(x, tuple) and x and x[0] == "sleep":
            time.sleep(x[1])
            return x
        if x == "raise":
            raise ValueError(f"stage {self.rank} refused the input")
        if x == "raise-last" and self.rank >= 10:
            raise ValueError(f"last stage {self.rank} refused the input")
        if x == "wait-event":
            if not self.event.wait(60):
                raise TimeoutError("nobody set the event")
            return "released"
        if isinstance(x, (int, float)):
            return x + self.rank
        return x

    def pair(self, a, b=0, c=0):
        return (a, b, c, self.rank)

    def set_event(self):
        self.event.set()
        return True

    def ping(self):
        return ("pong", self.rank, os.getpid())

    def num_calls(self):
        return self.calls

    def pid(self):
        return os.getpid()

    def die(self, x):
        if x == ("exit", self.rank):
            os._exit(3)
        if isinstance(x, tuple) and x and x[0] == "sleep":
            time.sleep(x[1])
        return x


def _actors(ray, ranks):
    cls = ray.remote(num_cpus=0)(Stage)
    actors = [cls.remote(r) for r in ranks]
    ray.get([a.ping.remote() for a in actors])
    return actors


def test_single_output_returns_one_ref_multi_returns_list(cg_ray):
    from ray.dag import InputNode, MultiOutputNode

    a, b = _actors(cg_ray, [1, 2])
    with InputNode() as inp:
        single = a.step.bind(inp)
    dag = single.experimental_compile()
    ref = dag.execute(10)
    assert not isinstance(ref, list)
    assert ref.get() == 11
    assert cg_ray.get(dag.execute(20)) == 21
    dag.teardown()

    with InputNode() as inp:
        multi = MultiOutputNode([a.step.bind(inp), b.step.bind(inp)])
    dag = multi.experimental_compile()
    refs = dag.execute(1)
    assert isinstance(refs, list) and len(refs) == 2
    assert cg_ray.get(refs) == [2, 3]
    dag.teardown()


def test_pipeline_two_stages_many_steps(cg_ray):
    from ray.dag import InputNode, MultiOutputNode

    s0 = _actors(cg_ray, [1, 2])
    s1 = _actors(cg_ray, [10, 20])
    with InputNode() as inp:
        outs = [w.step.bind(inp) for w in s0]
        outs = [w.step.bind(outs[i]) for i, w in enumerate(s1)]
        dag = MultiOutputNode(outs).experimental_compile()
    for i in range(30):
        assert cg_ray.get(dag.execute(i)) == [i + 11, i + 22]
    dag.teardown()


def test_get_once_no_pickle_no_copy(cg_ray):
    from ray.dag import InputNode

    (a,) = _actors(cg_ray, [1])
    with InputNode() as inp:
        dag = a.step.bind(inp).experimental_compile()
    ref = dag.execute(1)
    with pytest.raises(ValueError):
        pickle.dumps(ref)
    with pytest.raises(ValueError):
        copy.copy(ref)
    with pytest.raises(ValueError):
        copy.deepcopy(ref)
    assert ref.get() == 2
    with pytest.raises(ValueError, match="once"):
        ref.get()
    with pytest.raises(ValueError):
        cg_ray.get(ref)
    dag.teardown()


def test_ray_get_lists_mixed_list_and_wait(cg_ray):
    from ray.dag import InputNode, MultiOutputNode

    a, b = _actors(cg_ray, [1, 2])
    with InputNode() as inp:
        dag = MultiOutputNode([a.step.bind(inp), b.step.bind(inp)]).experimental_compile()
    refs = dag.execute(5)
    with pytest.raises(ValueError):
        cg_ray.get([refs[0], a.ping.remote()])
    with pytest.raises((TypeError, ValueError)):
        cg_ray.wait([refs[1]])
    assert cg_ray.get(refs[0]) == 6
    assert cg_ray.get([refs[1]]) == [7]
    dag.teardown()


def test_gets_out_of_order_buffer_the_rest(cg_ray):
    from ray.dag import InputNode, MultiOutputNode

    a, b = _actors(cg_ray, [1, 2])
    with InputNode() as inp:
        dag = MultiOutputNode([a.step.bind(inp), b.step.bind(inp)]).experimental_compile()
    r1, r2, r3 = dag.execute(100), dag.execute(200), dag.execute(300)
    assert r3[1].get() == 302
    assert r1[1].get() == 102
    assert r2[0].get() == 201
    assert r1[0].get() == 101
    assert r3[0].get() == 301
    assert r2[1].get() == 202
    # refs dropped unread do not block later executions
    for i in range(25):
        dag.execute(i)
    assert dag.execute(7)[0].get() == 8
    dag.teardown()


def test_input_attributes_and_constants(cg_ray):
    from ray.dag import InputNode, MultiOutputNode

    a, b = _actors(cg_ray, [1, 2])
    with InputNode() as inp:
        x = a.pair.bind(inp[0], inp[1], inp.z)
        y = b.pair.bind(inp[1], "k", c=7)
        dag = MultiOutputNode([x, y]).experimental_compile()
    assert cg_ray.get(dag.execute("p", "q", z="zz")) == [("p", "q", "zz", 1), ("q", "k", 7, 2)]
    with pytest.raises(ValueError):
        dag.execute("only-one", z=1)
    assert cg_ray.get(dag.execute(1, 2, z=3)) == [(1, 2, 3, 1), (2, "k", 7, 2)]
    dag.teardown()


def test_nodes_as_kwargs_are_refused(cg_ray):
    from ray.dag import InputNode

    (a,) = _actors(cg_ray, [1])
    with InputNode() as inp:
        node = a.pair.bind(inp[0], c=inp[1])
    with pytest.raises(ValueError, match="kwargs"):
        node.experimental_compile()


def test_task_without_a_node_argument_is_refused(cg_ray):
    from ray.dag import InputNode, MultiOutputNode

    a, b = _actors(cg_ray, [1, 2])
    with InputNode() as inp:
        node = MultiOutputNode([a.step.bind(inp), b.step.bind(40)])
    with pytest.raises(ValueError, match="InputNode or at least one other DAGNode"):
        node.experimental_compile()


def test_same_actor_twice_in_a_graph(cg_ray):
    from ray.dag import InputNode, MultiOutputNode

    a, b = _actors(cg_ray, [1, 10])
    with InputNode() as inp:
        x = a.step.bind(inp)
        y = b.step.bind(x)
        z = a.step.bind(y)
        dag = MultiOutputNode([z, x]).experimental_compile()
    assert cg_ray.get(dag.execute(0)) == [12, 1]
    assert cg_ray.get(dag.execute(5)) == [17, 6]
    dag.teardown()


def test_error_in_first_stage_is_forwarded_then_graph_goes_on(cg_ray):
    from ray.dag import InputNode, MultiOutputNode
    from ray.exceptions import RayTaskError

    s0 = _actors(cg_ray, [1, 2])
    s1 = _actors(cg_ray, [10, 20])
    with InputNode() as inp:
        outs = [w.step.bind(inp) for w in s0]
        outs = [w.step.bind(outs[i]) for i, w in enumerate(s1)]
        dag = MultiOutputNode(outs).experimental_compile()
    refs = dag.execute("raise")
    # as in Ray, one output's error (whichever Ray reads first) stands for
    # every output of the step
    with pytest.raises(ValueError, match="stage [12] refused") as info:
        refs[0].get()
    assert isinstance(info.value, RayTaskError)
    with pytest.raises(ValueError, match="stage [12] refused"):
        refs[1].get()
    assert cg_ray.get(dag.execute(1)) == [12, 23]
    # the last stage skipped the errored step: it ran only for the good one
    assert cg_ray.get([w.num_calls.remote() for w in s1]) == [1, 1]
    dag.teardown()


def test_error_in_last_stage(cg_ray):
    from ray.dag import InputNode, MultiOutputNode
    from ray.exceptions import RayTaskError

    s0 = _actors(cg_ray, [1])
    s1 = _actors(cg_ray, [10])
    with InputNode() as inp:
        dag = MultiOutputNode([s1[0].step.bind(s0[0].step.bind(inp))]).experimental_compile()
    with pytest.raises(RayTaskError, match="last stage 10 refused") as info:
        cg_ray.get(dag.execute("raise-last"))
    assert isinstance(info.value, ValueError)
    assert cg_ray.get(dag.execute(4)) == [15]
    dag.teardown()


def test_timeout_leaves_graph_usable(cg_ray):
    from ray.dag import InputNode
    from ray.exceptions import RayChannelError, RayChannelTimeoutError

    (a,) = _actors(cg_ray, [1])
    with InputNode() as inp:
        dag = a.step.bind(inp).experimental_compile()
    slow = dag.execute(("sleep", 2.0))
    with pytest.raises(RayChannelTimeoutError) as info:
        slow.get(timeout=0.2)
    assert isinstance(info.value, RayChannelError) and isinstance(info.value, TimeoutError)
    # the next get returns its own execution's value, not the late one
    assert dag.execute(5).get(timeout=30) == 6
    assert dag.execute(6).get() == 7
    dag.teardown()


def test_get_timeout_from_context(cg_ray):
    from ray.dag import DAGContext, InputNode
    from ray.exceptions import RayChannelTimeoutError

    (a,) = _actors(cg_ray, [1])
    ctx = DAGContext.get_current()
    old = ctx.get_timeout
    ctx.get_timeout = 1
    try:
        with InputNode() as inp:
            dag = a.step.bind(inp).experimental_compile()
    finally:
        ctx.get_timeout = old
    with pytest.raises(RayChannelTimeoutError):
        dag.execute(("sleep", 4.0)).get()
    assert dag.execute(1).get(timeout=30) == 2
    dag.teardown()


def test_get_timeout_env_read_at_ray_dag_import():
    code = (
        "import os\nos.environ.setdefault('RAY_CGRAPH_get_timeout', '300')\n"
        "from ray.dag import InputNode, MultiOutputNode\n"
        "from ray.dag import DAGContext\n"
        "os.environ['RAY_CGRAPH_get_timeout'] = '7'\n"
        "print(DAGContext.get_current().get_timeout)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_CGRAPH_get_timeout"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "300"
    env["RAY_CGRAPH_get_timeout"] = "42"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.split()[-1] == "42"


def test_capacity_exceeded(cg_ray):
    from ray.dag import InputNode
    from ray.exceptions import RayCgraphCapacityExceeded

    (a,) = _actors(cg_ray, [1])
    with InputNode() as inp:
        dag = a.step.bind(inp).experimental_compile(_max_inflight_executions=2)
    r1 = dag.execute(1)
    r2 = dag.execute(2)
    with pytest.raises(RayCgraphCapacityExceeded):
        dag.execute(3)
    assert r1.get() == 2
    r3 = dag.execute(3)
    assert r2.get() == 3 and r3.get() == 4
    dag.teardown()


def test_ordinary_calls_run_alongside_the_graph(cg_ray):
    from ray.dag import InputNode

    (a,) = _actors(cg_ray, [1])
    with InputNode() as inp:
        dag = a.step.bind(inp).experimental_compile()
    ref = dag.execute("wait-event")
    # the graph's call is blocked on the event; an ordinary call sets it
    assert cg_ray.get(a.ping.remote(), timeout=30)[0] == "pong"
    assert cg_ray.get(a.set_event.remote(), timeout=30) is True
    assert ref.get(timeout=30) == "released"
    dag.teardown()


def test_teardown_twice_actors_live_on(cg_ray):
    from ray.dag import InputNode

    (a,) = _actors(cg_ray, [1])
    with InputNode() as inp:
        dag = a.step.bind(inp).experimental_compile()
    assert dag.execute(1).get() == 2
    dag.teardown()
    dag.teardown()
    assert cg_ray.get(a.ping.remote(), timeout=30)[0] == "pong"
    # a new graph on the same actor works
    with InputNode() as inp:
        dag2 = a.step.bind(inp).experimental_compile()
    assert dag2.execute(2).get() == 3
    dag2.teardown()


def _death_graph(ray):
    from ray.dag import InputNode, MultiOutputNode

    s0 = _actors(ray, [1, 2])
    s1 = _actors(ray, [10, 20])
    with InputNode() as inp:
        outs = [w.die.bind(inp) for w in s0]
        outs = [w.step.bind(outs[i]) for i, w in enumerate(s1)]
        dag = MultiOutputNode(outs).experimental_compile()
    assert ray.get(dag.execute(1)) == [11, 21]
    return dag, s0, s1


def _wait_broken(dag, timeout=30.0):
    """execute() raises RayChannelError once the graph noticed a death."""
    from ray.exceptions import RayChannelError

    deadline = time.monotonic() + timeout
    refs = []
    while time.monotonic() < deadline:
        try:
            refs.append(dag.execute(1))
        except RayChannelError:
            return True
        except Exception:
            pass
        time.sleep(0.1)
        del refs[:]
    return False


@pytest.mark.parametrize("how", ["sigkill", "ray_kill", "os_exit"])
def test_death_pending_get_raises_and_teardown_completes(cg_ray, how):
    from ray.exceptions import RayActorError, RayChannelError, RayChannelTimeoutError

    dag, s0, s1 = _death_graph(cg_ray)
    victim = s0[1]
    pid = cg_ray.get(victim.pid.remote())
    if how == "os_exit":
        refs = dag.execute(("exit", 2))  # the victim exits in the graph's own call
    else:
        refs = dag.execute(("sleep", 1.0))
        if how == "sigkill":
            os.kill(pid, signal.SIGKILL)
        else:
            cg_ray.kill(victim)
    with pytest.raises((RayActorError, RayChannelError)) as info:
        cg_ray.get(refs, timeout=60)
    assert not isinstance(info.value, RayChannelTimeoutError)
    assert _wait_broken(dag)
    dag.teardown()
    dag.teardown()
    # the live actors still answer; vLLM's shutdown then kills them all
    assert cg_ray.get(s0[0].ping.remote(), timeout=30)[0] == "pong"
    for w in s0 + s1:
        cg_ray.kill(w)


def test_death_noticed_without_anyone_reading(cg_ray):
    dag, s0, s1 = _death_graph(cg_ray)
    os.kill(cg_ray.get(s1[1].pid.remote()), signal.SIGKILL)
    # nobody reads; later executes fail on their own
    assert _wait_broken(dag)
    dag.teardown()
    for w in s0 + s1:
        cg_ray.kill(w)
