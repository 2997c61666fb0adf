# SPDX-License-Identifier: Apache-2.0
"""Compiled graphs on beam, beyond the Ray API: torch tensors crossing
pipeline stages (inline, and through a registered gloo-backed communicator
whose send/recv the plan calls with only metadata in the frame), the graph's
background thread beside ordinary calls, teardown stopping it, TCP between
nodes, and values that cannot be pickled. Real beamd, real workers."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from beamkit.gloo import COMM_STATS, NEEDS_TORCH, GlooComm
from beamkit.procs import wait_until


class TensorStage:
    """Stage 0 makes {"hidden": tensor} from the step's input; stage 1 checks
    and sums it."""

    def __init__(self, rank):
        self.rank = rank

    def init_dist(self, rank, world, init_method):
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
        return dist.get_rank()

    def first(self, step):
        import torch

        n, seed = step
        g = torch.Generator().manual_seed(seed)
        hidden = torch.randn(n, generator=g).to(torch.bfloat16).reshape(-1, 16)
        return {"hidden": hidden, "residual": torch.arange(n // 16, dtype=torch.int64), "seed": seed}

    def second(self, inter):
        if isinstance(inter, dict):
            return {
                "sum": float(inter["hidden"].float().sum()),
                "rsum": int(inter["residual"].sum()),
                "dtype": str(inter["hidden"].dtype),
                "shape": tuple(inter["hidden"].shape),
                "seed": inter["seed"],
                "hidden": inter["hidden"] if inter["hidden"].numel() <= 64 else None,
            }
        return inter

    def thread_name(self, x):
        return threading.current_thread().name, threading.current_thread() is threading.main_thread()

    def stats(self):
        return dict(COMM_STATS)

    def ping(self):
        return os.getpid()

    def node_id(self):
        import ray

        return ray.get_runtime_context().get_node_id()

    async def async_step(self, x):
        import asyncio

        await asyncio.sleep(0)
        return ("async", x)

    def unpicklable(self, x):
        if x == "value":
            return threading.Lock()
        raise _BadError(threading.Lock())


class _BadError(Exception):
    pass


def _expected(n, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, generator=g).to(torch.bfloat16).reshape(-1, 16)
    return float(hidden.float().sum()), int(torch.arange(n // 16).sum())


def _two_stages(ray, opts=None):
    opts = opts or {}
    env = {"env_vars": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}}
    cls = ray.remote(num_cpus=0, runtime_env=env)(TensorStage)
    ws = [cls.options(**opts.get(i, {})).remote(i) for i in range(2)]
    ray.get([w.ping.remote() for w in ws], timeout=60)
    return ws


def _compile(ws, transport):
    from ray.dag import InputNode, MultiOutputNode

    with InputNode() as inp:
        mid = ws[0].first.bind(inp)
        if transport:
            mid = mid.with_tensor_transport(transport=transport)
        return MultiOutputNode([ws[1].second.bind(mid)]).experimental_compile()


@pytest.mark.parametrize("n", [64, 1 << 21])  # 128 B and 4 MiB of bf16
@pytest.mark.usefixtures("ray_start")
def test_tensor_crosses_stages_inline(n):
    pytest.importorskip("torch")
    import torch

    import ray

    ws = _two_stages(ray)
    dag = _compile(ws, "auto")  # no communicator registered: tensors ride in the frame
    for seed in range(3):
        out = dag.execute((n, seed))[0].get(timeout=60)
        want_sum, want_rsum = _expected(n, seed)
        assert out["sum"] == want_sum and out["rsum"] == want_rsum and out["seed"] == seed
        assert out["dtype"] == "torch.bfloat16" and out["shape"] == (n // 16, 16)
        if out["hidden"] is not None:
            assert torch.equal(out["hidden"], TensorStage(0).first((n, seed))["hidden"])
    assert ray.get(ws[0].stats.remote())["sends"] == 0
    dag.teardown()


for _mark in NEEDS_TORCH:
    test_tensor_crosses_stages_inline = _mark(test_tensor_crosses_stages_inline)


@pytest.mark.usefixtures("ray_start")
def test_tensor_through_registered_gloo_communicator(tmp_path):
    pytest.importorskip("torch")
    import ray
    from ray.experimental.channel import accelerator_context

    ws = _two_stages(ray)
    # a file rendezvous: a port picked free and bound later by the group's
    # store can be taken meanwhile by another process ("Address already in use")
    init = f"file://{tmp_path}/gloo-rendezvous"
    assert ray.get([w.init_dist.remote(i, 2, init) for i, w in enumerate(ws)], timeout=60) == [0, 1]
    accelerator_context.register_accelerator_context(torch_module_name="cuda", communicator_cls=GlooComm)
    try:
        dag = _compile(ws, "nccl")
        n = 1 << 20
        for seed in range(5):
            out = ray.get(dag.execute((n, seed)), timeout=60)[0]
            assert (out["sum"], out["rsum"]) == _expected(n, seed)
            assert out["dtype"] == "torch.bfloat16" and out["seed"] == seed
        # two tensors a step (hidden, residual) went through the communicator
        # (a sender counts once dist.send returns, maybe just after its peer got the tensor)
        assert wait_until(lambda: ray.get(ws[0].stats.remote())["sends"] == 10, timeout=30)
        s0, s1 = ray.get([w.stats.remote() for w in ws])
        assert s0["created"] == 1 and s1["created"] == 1
        assert s0["sends"] == 10 and s1["recvs"] == 10
        assert s0["bytes"] == 5 * (n * 2 + (n // 16) * 8)
        dag.teardown()
        dag.teardown()
        assert [s["destroyed"] for s in ray.get([w.stats.remote() for w in ws])] == [1, 1]
    finally:
        accelerator_context._global_custom_context = None


for _mark in NEEDS_TORCH:
    test_tensor_through_registered_gloo_communicator = _mark(test_tensor_through_registered_gloo_communicator)


def test_graph_runs_on_a_background_thread_teardown_stops_it(ray_start):
    import ray
    from ray.dag import InputNode, _runtime

    cls = ray.remote(num_cpus=0)(TensorStage)
    a = cls.remote(0)
    with InputNode() as inp:
        dag = a.thread_name.bind(inp).experimental_compile()
    name, on_main = dag.execute(1).get()
    assert name == "cgraph-exec" and not on_main
    assert ray.get(a.__ray_call__.remote(_runtime.running, dag.get_id())) is True
    dag.teardown()
    assert ray.get(a.__ray_call__.remote(_runtime.running, dag.get_id())) is False
    dag.teardown()
    assert ray.get(a.ping.remote()) > 0


def test_async_def_method_in_a_graph(ray_start):
    import ray
    from ray.dag import InputNode

    a = ray.remote(num_cpus=0)(TensorStage).remote(0)
    with InputNode() as inp:
        dag = a.async_step.bind(inp).experimental_compile()
    assert [dag.execute(i).get() for i in range(3)] == [("async", 0), ("async", 1), ("async", 2)]
    dag.teardown()


def test_unpicklable_output_and_error(ray_start):
    import ray
    from ray.dag import InputNode
    from ray.exceptions import RayTaskError

    cls = ray.remote(num_cpus=0)(TensorStage)
    a = cls.remote(0)
    with InputNode() as inp:
        dag = a.unpicklable.bind(inp).experimental_compile()
    with pytest.raises(RayTaskError, match="could not be serialized"):
        dag.execute("value").get()
    with pytest.raises(RayTaskError, match="_BadError"):  # its cause replaced by a picklable one
        dag.execute("error").get()
    dag.teardown()
    assert ray.get(a.ping.remote()) > 0


def test_unsupported_parts_say_so(ray_start):
    import ray
    from ray.dag import CompiledGraphsNotSupportedError, InputNode

    cls = ray.remote(num_cpus=0)(TensorStage)
    a = cls.remote(0)
    with InputNode() as inp:
        node = a.ping.bind()
        with pytest.raises(CompiledGraphsNotSupportedError):
            node.experimental_compile(enable_asyncio=True)
        with pytest.raises(CompiledGraphsNotSupportedError):
            a.second.bind([inp])
        with pytest.raises(CompiledGraphsNotSupportedError):
            node.execute()


@pytest.mark.parametrize("transport", [None, "auto"])
def test_pipeline_across_two_nodes_over_tcp(make_cluster, transport):
    pytest.importorskip("torch")
    c = make_cluster(members=1, gpus=2)
    import ray

    ray.init(address=c.head.socket)
    ws = _two_stages(ray, {0: {"resources": {"node:127.0.0.1": 0.001}}, 1: {"resources": {"node:127.0.0.2": 0.001}}})
    # the stages run under different daemons: the plan connects them over TCP
    assert len(set(ray.get([w.node_id.remote() for w in ws]))) == 2
    dag = _compile(ws, transport)
    n = 1 << 16
    for seed in range(5):
        out = dag.execute((n, seed))[0].get(timeout=60)
        assert (out["sum"], out["rsum"]) == _expected(n, seed)
    dag.teardown()
    ray.shutdown()


for _mark in NEEDS_TORCH:
    test_pipeline_across_two_nodes_over_tcp = _mark(test_pipeline_across_two_nodes_over_tcp)


# -- the listeners under a flood of idle peers ------------------------------------

FLOOD = 50
OTHER_UID = 64124

# As another uid: connect to the abstract unix socket argv[1] (hex) and say how
# many bytes came before the listener closed ("hung" if it did not within 10 s).
_FOREIGN_PEER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(bytes.fromhex(sys.argv[1]))
got = b""
try:
    while True:
        chunk = s.recv(64)
        if not chunk:
            break
        got += chunk
except socket.timeout:
    print("hung"); sys.exit(0)
except ConnectionResetError:
    pass
print(len(got))
"""


def _idle_peers(address, n):
    """n connections that never send a byte to each of a plan's listeners."""
    socks = []
    for _ in range(n):
        for family, target in ((socket.AF_UNIX, address["unix"]), (socket.AF_INET, tuple(address["tcp"]))):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(target)
            socks.append(s)
    return socks


def _foreign_peer(address):
    """What a unix peer of another uid gets from the listener at address."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", _FOREIGN_PEER, address["unix"].encode().hex()],
        capture_output=True,
        text=True,
        timeout=30,
        user=OTHER_UID,
        group=OTHER_UID,
        extra_groups=[],
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _compile_and_run(ray, actors, hook=None):
    """Seconds for experimental_compile() + one execute().get() of a 2-stage
    pipeline, less the time hook(infos) took: it runs once the actors'
    listeners are up (the prepare round's answer), before any peer connects."""
    from ray.dag import InputNode, MultiOutputNode

    real_get = ray.get
    in_hook = [0.0]

    def get(refs, *a, **kw):
        out = real_get(refs, *a, **kw)
        if hook is not None and isinstance(out, list) and out and isinstance(out[0], dict) and "address" in out[0]:
            t = time.monotonic()
            hook(out)
            in_hook[0] += time.monotonic() - t
        return out

    ray.get = get
    try:
        t0 = time.monotonic()
        with InputNode() as inp:
            dag = MultiOutputNode([actors[1].step.bind(actors[0].step.bind(inp))]).experimental_compile()
        assert dag.execute(7)[0].get(timeout=60) == 7
        took = time.monotonic() - t0 - in_hook[0]
    finally:
        ray.get = real_get
    dag.teardown()
    return took


class Echo:
    def step(self, x):
        return x


def test_idle_and_foreign_peers_do_not_stall_compile(ray_start):
    """50 idle connections to each listener (unix and TCP) of each actor,
    opened after the listeners are up and before any real peer connects:
    compile + execute takes about as long as without them; the idle peers
    are closed once the graph's peers are in; a unix peer of another uid is
    closed before it is sent anything."""
    import ray

    actors = [ray.remote(num_cpus=0)(Echo).remote() for _ in range(2)]
    ray.get([a.step.remote(0) for a in actors])
    _compile_and_run(ray, actors)  # warm: imports in the workers
    quiet = _compile_and_run(ray, actors)
    idle, foreign = [], []

    def flood(infos):
        for info in infos:
            idle.extend(_idle_peers(info["address"], FLOOD))
        if os.geteuid() == 0:
            foreign.append(_foreign_peer(infos[0]["address"]))

    flooded = _compile_and_run(ray, actors, flood)
    print(
        f"compile + execute: {quiet * 1e3:.1f} ms quiet, {flooded * 1e3:.1f} ms with {FLOOD} idle peers "
        f"on each of {2 * len(actors)} listeners"
    )
    assert len(idle) == 2 * len(actors) * FLOOD
    # an idle peer got its nonce, then was closed (not kept waiting)
    for s in idle:
        got = b""
        while True:
            chunk = s.recv(64)
            if not chunk:
                break
            got += chunk
        s.close()
        assert len(got) == 16
    if foreign:
        assert foreign == ["0"]
    # far below the handshake deadline an idle peer is given (2 s): no peer waited on one
    assert flooded < quiet + 1.0, (quiet, flooded)
