# SPDX-License-Identifier: Apache-2.0
"""Compiled-graph edges on one node through shared memory
(docs/DESIGN.md, "Compiled graphs"; ray/dag/_transport.py, Lane): a
step's out-of-band buffers of SHM_MIN bytes or more go into a memfd slot of
the writer, the reader maps it: numpy arrays arrive as read-only views of
the mapping (no socket copy), CPU torch tensors as their own writable copy
of it; a slot is not written again while its reader holds a view; a
SIGKILLed actor leaves no memfd or mapping behind. Small values and values
crossing nodes keep the socket. Real beamd, real workers."""

import gc
import os
import signal

import pytest

from beamkit.gloo import NEEDS_TORCH
from beamkit.procs import BEAM_MEMFD, wait_until
from beamkit.procs import memfds as _memfds

np = pytest.importorskip("numpy")

MIB = 1 << 20
SHM_MIN = int(os.environ.get("BEAM_CGRAPH_SHM_MIN", MIB))  # as ray/dag/_transport.py reads it
MEMFD = BEAM_MEMFD


def _mappings(pid):
    with open(f"/proc/{pid}/maps") as f:
        return sum(MEMFD in line for line in f)


def _maps_memfd(arr):
    """Whether arr's memory lies in a mapping of a beam-object memfd of this
    process (/proc/self/maps)."""
    addr = arr.__array_interface__["data"][0]
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return MEMFD in line
    return False


class Stage:
    def __init__(self):
        self.held = []

    def make(self, step):
        n, fill = step
        return np.full(n, fill % 251, dtype=np.uint8)

    def look(self, x):
        return x.nbytes, int(x[0]), int(x[-1]), bool(x.flags.writeable), _maps_memfd(x)

    def passthrough(self, x):
        return x

    def hold(self, x):
        """Keeps every value it got (views of its slots) and checks them all."""
        self.held.append((int(x[0]), x))
        return all(bool((v == fill).all()) for fill, v in self.held)

    def make_tensor(self, step):
        import torch

        n, fill = step
        return torch.full((n // 4,), float(fill), dtype=torch.float32)

    def look_tensor(self, t):
        import torch

        ok = bool((t == t[0]).all())
        t.add_(1)  # its own memory: writable
        return tuple(t.shape), float(t[0]), ok, isinstance(t, torch.Tensor)

    def memfds(self):
        gc.collect()
        return _memfds(os.getpid()), _mappings(os.getpid())

    def pid(self):
        return os.getpid()


def _two(ray):
    S = ray.remote(num_cpus=0)(Stage)
    return S.remote(), S.remote()


def test_large_numpy_between_actors_and_to_the_driver_is_a_view_of_a_slot(ray_start):
    ray = ray_start
    from ray.dag import InputNode, MultiOutputNode

    a, b = _two(ray)
    with InputNode() as inp:
        x = a.make.bind(inp)
        dag = MultiOutputNode([b.look.bind(x), x])
    cd = dag.experimental_compile()
    try:
        for n in (64 << 10, MIB, 8 * MIB + 3):
            for fill in (1, 2):
                seen, arr = ray.get(cd.execute((n, fill)))
                assert seen[:3] == (n, fill, fill)
                assert arr.nbytes == n and int(arr[0]) == fill and int(arr[-1]) == fill
                big = n >= SHM_MIN
                # over the threshold: read-only views of the mapped slot, in the actor and here
                assert seen[3] is not big and seen[4] is big
                assert arr.flags.writeable is not big and _maps_memfd(arr) is big
    finally:
        cd.teardown()


def test_a_large_graph_input_reaches_the_actor_through_a_slot(ray_start):
    ray = ray_start
    from ray.dag import InputNode

    a, _ = _two(ray)
    with InputNode() as inp:
        dag = a.look.bind(inp)
    cd = dag.experimental_compile()
    try:
        for fill in range(3):
            x = np.full(2 * MIB, fill, dtype=np.uint8)
            assert ray.get(cd.execute(x)) == (2 * MIB, fill, fill, False, True)
    finally:
        cd.teardown()


@pytest.mark.parametrize("n", [4 << 10, 4 * MIB])
@pytest.mark.skipif(any(m.args[0] for m in NEEDS_TORCH), reason="needs torch")
def test_cpu_tensors_arrive_intact_and_writable(ray_start, n):
    ray = ray_start
    from ray.dag import InputNode, MultiOutputNode

    a, b = _two(ray)
    with InputNode() as inp:
        t = a.make_tensor.bind(inp)
        dag = MultiOutputNode([b.look_tensor.bind(t), t])
    cd = dag.experimental_compile()
    try:
        for fill in (3, 4):
            seen, t = ray.get(cd.execute((n, fill)))
            assert seen == ((n // 4,), fill + 1.0, True, True)
            assert tuple(t.shape) == (n // 4,) and bool((t == fill).all())
            t.add_(1)  # the driver's copy is its own too
    finally:
        cd.teardown()


def test_a_reader_holding_views_sees_them_unchanged_while_later_steps_run(ray_start):
    ray = ray_start
    from ray.dag import InputNode, MultiOutputNode

    a, b = _two(ray)
    with InputNode() as inp:
        x = a.make.bind(inp)
        dag = MultiOutputNode([b.hold.bind(x), a.passthrough.bind(x)])
    cd = dag.experimental_compile()
    try:
        kept = []
        for step in range(30):  # more steps than a writer's slots: held ones are never written again
            ok, arr = ray.get(cd.execute((MIB, step)))
            assert ok
            if step % 2 == 0:
                kept.append((step % 251, arr))
            assert all(bool((v == fill).all()) for fill, v in kept)
        # the slots the driver holds are never written again; past a writer's
        # max_inflight_executions + 1 slots, all held, the values came through the socket
        mapped = [_maps_memfd(v) for _, v in kept]
        assert mapped[0] and 0 < sum(mapped) <= 11, mapped
    finally:
        cd.teardown()


def test_sigkill_of_an_actor_mid_graph_leaves_no_memfd_or_mapping(ray_start):
    ray = ray_start
    from ray.dag import InputNode, MultiOutputNode

    a, b = _two(ray)
    me = os.getpid()
    gc.collect()
    base = (_memfds(me), _mappings(me))
    assert ray.get(a.memfds.remote()) == (0, 0)
    with InputNode() as inp:
        x = a.make.bind(inp)
        dag = MultiOutputNode([b.passthrough.bind(x), a.look.bind(x)])
    cd = dag.experimental_compile()
    try:
        held = [ray.get(cd.execute((2 * MIB, s))) for s in range(4)]
        assert all(_maps_memfd(v) for v, _ in held)
        ref = cd.execute((2 * MIB, 9))
        os.kill(ray.get(b.pid.remote()), signal.SIGKILL)
        with pytest.raises(Exception):
            ray.get(ref, timeout=30)
            ray.get(cd.execute((2 * MIB, 10)), timeout=30)
    finally:
        cd.teardown()
    del held
    gc.collect()
    # the driver's slots went with the graph and its views of b's slots with the views;
    # a's slots went at teardown, what b held went with b
    assert (_memfds(me), _mappings(me)) == base
    assert wait_until(lambda: ray.get(a.memfds.remote()) == (0, 0), 10), ray.get(a.memfds.remote())
