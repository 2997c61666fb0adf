# SPDX-License-Identifier: Apache-2.0
"""The cluster end to end on one machine: a head beamd on 127.0.0.1 and
members on 127.0.0.2, 127.0.0.3, ... (beamkit.daemon.Cluster), each with its
own socket and pretend GPUs, --node-timeout 2.

What is checked: the state API sees every node; placement strategies across
nodes; actors on another node (their node id, IP, GPUs, output, call order);
a driver on a member; node death by SIGKILL, by SIGSTOP, and of the head;
nodes that come back; and the link's authentication (garbage, a bad MAC, a
wrong token, a replayed answer) and where it listens."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from beamkit.daemon import driver_env, run_driver
from beamkit.link import RawPeer, challenge, head_mac, node_mac, read_token
from beamkit.procs import alive, beam_processes, read_line, wait_gone, wait_until
from beamkit.wire import FrameSocket, message, push, unpack

HEAD_IP, M1, M2 = "127.0.0.1", "127.0.0.2", "127.0.0.3"


def _init(c):
    import ray

    ray.init(address=c.head.socket)
    return ray


def _pg():
    from ray.util import placement_group, placement_group_table, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return placement_group, placement_group_table, remove_placement_group, PlacementGroupSchedulingStrategy


def _on(ip):
    """Options that pin an actor to the node with that IP."""
    return {"resources": {f"node:{ip}": 0.001}}


def _where_class(ray):
    @ray.remote(num_cpus=0, num_gpus=1)
    class Where:
        def where(self):
            import ray as r
            from ray.util import get_node_ip_address

            return {
                "node_id": r.get_runtime_context().get_node_id(),
                "ip": get_node_ip_address(),
                "gpus": r.get_gpu_ids(),
                "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "accel": r.get_runtime_context().get_accelerator_ids()["GPU"],
                "pid": os.getpid(),
                "socket": os.environ.get("BEAM_SOCKET"),
            }

        def pid(self):
            return os.getpid()

        def sleep(self, s):
            time.sleep(s)
            return s

    return Where


# --- the state API sees the whole cluster ---


def test_tables_see_every_node(make_cluster):
    c = make_cluster(members=2, member_gpu_ids=[[4, 5], [6, 7]])
    ray = _init(c)
    from ray._private import state
    from ray.util.state import list_nodes

    ids = c.alive_nodes()
    assert sorted(ids) == [HEAD_IP, M1, M2]
    nodes = ray.nodes()
    assert {n["NodeManagerAddress"]: n["NodeID"] for n in nodes} == ids
    assert all(n["Alive"] and len(n["NodeID"]) == 56 for n in nodes)
    assert [n["IsHeadNode"] for n in nodes if n["NodeManagerAddress"] == HEAD_IP] == [True]
    assert ray.get_runtime_context().get_node_id() == ids[HEAD_IP]

    total = ray.cluster_resources()
    assert total["GPU"] == 6.0 and total["CPU"] == 12.0
    for ip in ids:
        assert total[f"node:{ip}"] == 1.0
    assert total["node:__internal_head__"] == 1.0

    per_node = state.available_resources_per_node()
    assert set(per_node) == set(ids.values())
    for ip, nid in ids.items():
        res = per_node[nid]
        assert res["GPU"] == 2.0 and res["CPU"] == 4.0 and res[f"node:{ip}"] == 1.0
        # vLLM's DP code: exactly one node:<ip> besides the head's marker
        assert [k for k in res if k.startswith("node:") and k != "node:__internal_head__"] == [f"node:{ip}"]
        assert ("node:__internal_head__" in res) == (ip == HEAD_IP)
    assert state.total_resources_per_node() == per_node

    listed = {n.node_ip: n for n in list_nodes()}
    assert {ip: n.node_id for ip, n in listed.items()} == ids
    assert listed[HEAD_IP].is_head_node and not listed[M1].is_head_node
    assert all(n.state == "ALIVE" for n in listed.values())

    # a group pinned bundle by bundle: the table maps each bundle to its node
    placement_group, table, remove, _ = _pg()
    pg = placement_group(
        [{"GPU": 1, f"node:{M2}": 0.001}, {"GPU": 2, f"node:{M1}": 0.001}, {"CPU": 1, f"node:{HEAD_IP}": 0.001}]
    )
    assert pg.wait(10)
    t = table(pg)
    assert t["bundles_to_node_id"] == {0: ids[M2], 1: ids[M1], 2: ids[HEAD_IP]}
    assert t["state"] == "CREATED"
    assert table()[pg.id.hex()]["bundles_to_node_id"] == t["bundles_to_node_id"]
    per_node = state.available_resources_per_node()
    assert per_node[ids[M2]]["GPU"] == 1.0 and per_node[ids[M1]].get("GPU", 0) == 0
    assert per_node[ids[HEAD_IP]]["CPU"] == 3.0 and per_node[ids[HEAD_IP]]["GPU"] == 2.0
    assert ray.available_resources()["GPU"] == 3.0
    # the daemon's own status, as beamctl prints it
    st = c.status()
    assert {n["node_ip"]: n["alive"] for n in st["nodes"]} == {HEAD_IP: True, M1: True, M2: True}
    remove(pg)
    assert wait_until(lambda: ray.available_resources().get("GPU") == 6.0, 5)


# --- placement strategies across nodes ---


def _placed(table, pg):
    return list(table(pg)["bundles_to_node_id"].values())


def test_strategies_across_nodes(make_cluster):
    c = make_cluster(members=2)
    _init(c)
    placement_group, table, remove, _ = _pg()
    ids = c.alive_nodes()

    # PACK fills one node before it uses the next
    pg = placement_group([{"GPU": 1}] * 3, strategy="PACK")
    assert pg.wait(10)
    where = _placed(table, pg)
    assert sorted(where.count(n) for n in set(where)) == [1, 2]
    assert where[0] == where[1] != where[2]
    remove(pg)
    pg = placement_group([{"GPU": 1}] * 2, strategy="PACK")
    assert pg.wait(10)
    assert len(set(_placed(table, pg))) == 1
    remove(pg)

    # STRICT_PACK: one node, or wait
    pg = placement_group([{"GPU": 1, "CPU": 1}] * 2, strategy="STRICT_PACK")
    assert pg.wait(10)
    assert len(set(_placed(table, pg))) == 1
    remove(pg)
    big = placement_group([{"GPU": 1}] * 3, strategy="STRICT_PACK")
    assert big.wait(0.3) is False and table(big)["state"] == "PENDING"
    remove(big)

    # SPREAD and STRICT_SPREAD: distinct nodes
    for strategy in ("SPREAD", "STRICT_SPREAD"):
        pg = placement_group([{"GPU": 1}] * 3, strategy=strategy)
        assert pg.wait(10), strategy
        assert sorted(_placed(table, pg)) == sorted(ids.values()), strategy
        remove(pg)
    four = placement_group([{"CPU": 1}] * 4, strategy="STRICT_SPREAD")
    assert four.wait(0.3) is False
    remove(four)
    # SPREAD is soft: four bundles on three nodes still place
    pg = placement_group([{"CPU": 1}] * 4, strategy="SPREAD")
    assert pg.wait(10)
    assert set(_placed(table, pg)) == set(ids.values())
    remove(pg)


# --- an actor on another node ---


def test_actor_on_member_reports_that_node(make_cluster):
    c = make_cluster(members=2, member_gpu_ids=[[4, 5], [6, 7]])
    ray = _init(c)
    ids = c.alive_nodes()
    Where = _where_class(ray)
    a = Where.options(**_on(M2)).remote()
    w = ray.get(a.where.remote(), timeout=15)
    assert w["node_id"] == ids[M2] and w["ip"] == M2
    assert w["gpus"] in ([6], [7]) and w["cuda"] == str(w["gpus"][0]) and w["accel"] == [w["cuda"]]
    # its worker runs under that member's daemon
    assert w["socket"] == c.members[1].socket and w["pid"] in beam_processes(c.members[1].socket)
    b = Where.options(**_on(M2)).remote()
    w2 = ray.get(b.where.remote(), timeout=15)
    assert w2["node_id"] == ids[M2] and {w["cuda"], w2["cuda"]} == {"6", "7"}
    # the member's GPUs are both taken: a third waits, then runs once one is free
    third = Where.options(**_on(M2)).remote()
    pending = third.where.remote()
    assert ray.wait([pending], timeout=0.5)[0] == []
    ray.kill(a)
    assert ray.get(pending, timeout=15)["cuda"] == w["cuda"]
    # the driver's own view of actors names the node
    from ray.util.state import list_actors

    on = {s.actor_id: s.node_id for s in list_actors()}
    assert on[b._actor_id.hex()] == ids[M2]


ORDER_DRIVER = textwrap.dedent("""
    import json, sys, ray
    ray.init()

    @ray.remote(num_cpus=0)
    class Log:
        def __init__(self):
            self.seen = []

        def add(self, i):
            self.seen.append(i)
            return i

        def seen_list(self):
            return self.seen

    a = Log.options(resources={"node:%s": 0.001}).remote()
    refs = [a.add.remote(i) for i in range(200)]
    seen = ray.get(a.seen_list.remote(), timeout=20)
    sys.stdout.write("RESULT " + json.dumps([seen, ray.get(refs, timeout=10)]) + "\\n")
""")


@pytest.mark.parametrize("driver_ip,actor_ip", [(HEAD_IP, M1), (M1, HEAD_IP), (M1, M2)])
def test_call_order_across_nodes(make_cluster, driver_ip, actor_ip):
    """200 calls from one caller run in submission order, whichever nodes
    the caller and the actor are on (member to member goes through the head)."""
    c = make_cluster(members=2)
    node = {HEAD_IP: c.head, M1: c.members[0], M2: c.members[1]}[driver_ip]
    r = run_driver(ORDER_DRIVER % actor_ip, driver_env(node), timeout=40)
    assert r.returncode == 0, r.stderr
    seen, returned = json.loads(r.stdout.split("RESULT ", 1)[1])
    assert seen == list(range(200)) and returned == list(range(200))


def test_nested_calls_children_and_deaths_on_members(make_cluster):
    """A worker on a member is a client like any other: it calls actors on
    other nodes and makes children (placed on its own node first). A worker
    that crashes there, or is killed, dies as on the head, and its node gets
    its resources back."""
    c = make_cluster(members=2)
    ray = _init(c)
    ids = c.alive_nodes()
    from ray._private import state

    @ray.remote(num_cpus=1)
    class Hop:
        def node(self):
            return ray.get_runtime_context().get_node_id()

        def pid(self):
            return os.getpid()

        def ask(self, other):
            return ray.get(other.node.remote(), timeout=10)

        def child_node(self):
            child = Hop.remote()
            return ray.get(child.node.remote(), timeout=10)

        def roundtrip(self, n):
            return len(ray.get(ray.put(b"x" * n)))

        def echo(self, x):
            return x

        def crash(self):
            os._exit(3)

    one = Hop.options(**_on(M1)).remote()
    two = Hop.options(**_on(M2)).remote()
    head = Hop.options(**_on(HEAD_IP)).remote()
    assert ray.get(one.ask.remote(two), timeout=15) == ids[M2]
    assert ray.get(one.ask.remote(head), timeout=15) == ids[HEAD_IP]
    assert ray.get(one.child_node.remote(), timeout=15) == ids[M1]
    assert ray.get(two.roundtrip.remote(8 << 20), timeout=15) == 8 << 20
    big = os.urandom(16 << 20)  # by value, and by a ref the driver put
    assert ray.get(two.echo.remote(big), timeout=15) == big
    assert ray.get(two.echo.remote(ray.put(big)), timeout=15) == big
    # a crash on a member
    with pytest.raises(ray.exceptions.ActorDiedError, match="worker process has died"):
        ray.get(two.crash.remote(), timeout=10)
    # ray.kill of an actor on a member
    pid = ray.get(one.pid.remote(), timeout=10)
    ray.kill(one)
    with pytest.raises(ray.exceptions.ActorDiedError, match="ray.kill"):
        ray.get(one.pid.remote(), timeout=10)
    assert wait_gone(pid, 5)
    assert wait_until(
        lambda: state.available_resources_per_node()[ids[M1]]["CPU"] == 4.0
        and state.available_resources_per_node()[ids[M2]]["CPU"] == 4.0,
        5,
    ), state.available_resources_per_node()


# --- a driver on a member node ---

MEMBER_DRIVER = textwrap.dedent("""
    import json, os, sys, ray
    from ray.util import get_node_ip_address, placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    ray.init()
    out = {"me": ray.get_runtime_context().get_node_id(), "ip": get_node_ip_address(),
           "nodes": {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}}

    @ray.remote(num_cpus=0, num_gpus=1)
    class Where:
        def where(self):
            return ray.get_runtime_context().get_node_id(), get_node_ip_address(), ray.get_gpu_ids()

    pg = placement_group([{"GPU": 1}] * 2, strategy="STRICT_SPREAD")
    assert pg.wait(10)
    out["bundles"] = placement_group_table(pg)["bundles_to_node_id"]
    actors = [Where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i))
              .remote() for i in range(2)]
    out["where"] = ray.get([a.where.remote() for a in actors], timeout=15)
    local = Where.options(num_gpus=0, resources={"node:" + out["ip"]: 0.001}).remote()
    out["local"] = ray.get(local.where.remote(), timeout=15)
    sys.stdout.write("RESULT " + json.dumps(out) + "\\n")
""")


def test_driver_on_member(cluster):
    ids = cluster.alive_nodes()
    r = run_driver(MEMBER_DRIVER, driver_env(cluster.members[0]), timeout=40)
    assert r.returncode == 0, r.stderr + cluster.logs()
    out = json.loads(r.stdout.split("RESULT ", 1)[1])
    assert out["me"] == ids[M1] and out["ip"] == M1
    assert out["nodes"] == ids
    assert sorted(out["bundles"].values()) == sorted(ids.values())
    for i, (nid, ip, gpus) in enumerate(out["where"]):
        assert nid == out["bundles"][str(i)] and ids[ip] == nid and len(gpus) == 1
    assert out["local"][:2] == [ids[M1], M1]
    # the driver's actors went with it
    assert wait_until(
        lambda: not beam_processes(cluster.members[0].socket) and not beam_processes(cluster.head.socket), 5
    )


# --- worker output reaches the driver, prefixed ---

PRINTER = textwrap.dedent("""
    import os, sys, ray
    ray.init()

    @ray.remote(num_cpus=0)
    class Printer:
        def say(self, text):
            print(text, flush=True)
            print("err " + text, file=sys.stderr, flush=True)
            return os.getpid()

    pids = {}
    for ip in ("127.0.0.1", "127.0.0.2"):
        p = Printer.options(resources={"node:" + ip: 0.001}).remote()
        pids[ip] = ray.get(p.say.remote("hello from " + ip), timeout=15)
    import time
    time.sleep(0.5)  # log pushes are asynchronous to the reply
    print("PIDS", pids["127.0.0.1"], pids["127.0.0.2"], flush=True)
""")


@pytest.mark.parametrize("driver_node", ["head", "member"])
def test_worker_output_reaches_driver(cluster, driver_node):
    node = cluster.head if driver_node == "head" else cluster.members[0]
    r = run_driver(PRINTER, driver_env(node), timeout=40)
    assert r.returncode == 0, r.stderr
    # worker lines are printed by the driver's log thread: one may follow
    # "PIDS a b" on its line, before print()'s newline
    head_pid, member_pid = (int(x) for x in re.search(r"PIDS (\d+) (\d+)", r.stdout).groups())
    both = r.stdout + r.stderr
    for pid, ip in ((head_pid, HEAD_IP), (member_pid, M1)):
        assert f"(Printer pid={pid}) hello from {ip}" in both, both
        assert f"(Printer pid={pid}) err hello from {ip}" in r.stderr, r.stderr
    assert f"(Printer pid={member_pid}) hello from {M1}" in r.stdout


# --- a member dies ---


def test_member_sigkill_mid_call(cluster):
    ray = _init(cluster)
    ids = cluster.alive_nodes()
    Where = _where_class(ray)
    far = Where.options(**_on(M1)).remote()
    far_pid = ray.get(far.pid.remote(), timeout=15)
    near = Where.options(**_on(HEAD_IP)).remote()
    assert ray.get(near.pid.remote(), timeout=15)
    pg = _pg()[0]([{"GPU": 1}] * 2, strategy="STRICT_SPREAD")
    assert pg.wait(10)
    running = far.sleep.remote(60)
    assert ray.wait([running], timeout=0.3)[0] == []
    t0 = time.monotonic()
    cluster.members[0].kill9()
    with pytest.raises(ray.exceptions.ActorDiedError, match="node has died") as e:
        ray.get(running, timeout=2 * cluster.node_timeout + 2)
    assert time.monotonic() - t0 < 2 * cluster.node_timeout + 1
    assert isinstance(e.value, ray.exceptions.RayActorError)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(far.pid.remote(), timeout=5)
    # the worker on the dead node went with it
    assert wait_gone(far_pid, 5)
    # the tables know
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    assert nodes[ids[M1]]["Alive"] is False and nodes[ids[HEAD_IP]]["Alive"] is True
    assert {n["node_id"]: n["alive"] for n in cluster.status()["nodes"]}[ids[M1]] is False
    from ray._private import state
    from ray.util.state import list_nodes

    assert set(state.available_resources_per_node()) == {ids[HEAD_IP]}
    assert ray.cluster_resources()["GPU"] == 2.0
    assert {n.node_id: n.state for n in list_nodes()}[ids[M1]] == "DEAD"
    assert _pg()[1](pg)["state"] == "RESCHEDULING"
    # the rest of the cluster goes on: old and new actors on the head (its
    # two GPUs: one is near's, one the group's surviving bundle's)
    assert ray.get(near.where.remote(), timeout=10)["node_id"] == ids[HEAD_IP]
    assert ray.available_resources().get("GPU", 0) == 0
    _pg()[2](pg)
    fresh = Where.remote()
    assert ray.get(fresh.where.remote(), timeout=15)["node_id"] == ids[HEAD_IP]
    cluster.members[0].expect_signal = True


def test_member_sigstop_is_marked_dead_and_rejoins(cluster):
    ray = _init(cluster)
    ids = cluster.alive_nodes()
    member = cluster.members[0]
    Where = _where_class(ray)
    far = Where.options(**_on(M1)).remote()
    far_pid = ray.get(far.pid.remote(), timeout=15)
    t0 = time.monotonic()
    member.signal(signal.SIGSTOP)
    try:
        assert cluster.wait_dead(ids[M1], 2 * cluster.node_timeout + 1), cluster.logs()
        took = time.monotonic() - t0
        assert took >= cluster.node_timeout * 0.9, took  # not before the timeout
        with pytest.raises(ray.exceptions.ActorDiedError, match="node has died"):
            ray.get(far.pid.remote(), timeout=5)
    finally:
        member.signal(signal.SIGCONT)
    # it notices it lost the head, kills its workers and joins again: a new node
    assert wait_until(lambda: len(cluster.alive_nodes()) == 2, 8), cluster.logs()
    now = cluster.alive_nodes()
    assert now[M1] != ids[M1] and now[HEAD_IP] == ids[HEAD_IP]
    assert wait_gone(far_pid, 5)
    table = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
    assert table == {ids[HEAD_IP]: True, ids[M1]: False, now[M1]: True}
    again = Where.options(**_on(M1)).remote()
    assert ray.get(again.where.remote(), timeout=15)["node_id"] == now[M1]


def test_member_restarted_with_same_ip_is_a_new_node(cluster):
    ray = _init(cluster)
    ids = cluster.alive_nodes()
    member = cluster.members[0]
    assert member.stop() == 0
    assert cluster.wait_dead(ids[M1], 3), cluster.logs()
    member.start()
    cluster.wait_alive(2)
    now = cluster.alive_nodes()
    assert now[M1] != ids[M1]
    alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
    assert alive == {ids[HEAD_IP]: True, ids[M1]: False, now[M1]: True}
    a = _where_class(ray).options(**_on(M1)).remote()
    assert ray.get(a.where.remote(), timeout=15)["node_id"] == now[M1]


# --- the head dies ---

LOOPING_DRIVER = textwrap.dedent("""
    import os, sys, time, ray
    ray.init()

    @ray.remote(num_cpus=0)
    class Echo:
        def pid(self):
            return os.getpid()

    a = Echo.options(resources={"node:127.0.0.2": 0.001}).remote()
    print("WORKER", ray.get(a.pid.remote(), timeout=15), flush=True)
    try:
        while True:
            ray.get(a.pid.remote(), timeout=30)
            time.sleep(0.01)
    except BaseException as e:
        print("RAISED", type(e).__module__ + "." + type(e).__name__, time.monotonic(), flush=True)
        print("MESSAGE", e, flush=True)
""")


def _start_driver(node, code):
    env = dict(os.environ)
    env.update(driver_env(node))
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_head_killed_then_restarted(cluster):
    member = cluster.members[0]
    ids = cluster.alive_nodes()
    drv = _start_driver(member, LOOPING_DRIVER)
    try:
        worker = int(read_line(drv, "WORKER ", timeout=20))
        assert alive(worker)
        t0 = time.monotonic()
        cluster.head.kill9()
        raised = read_line(drv, "RAISED ", timeout=2 * cluster.node_timeout + 3)
        kind, when = raised.split()
        assert kind in ("ray.exceptions.RaySystemError", "builtins.ConnectionError"), raised
        assert float(when) - t0 < cluster.node_timeout + 1, float(when) - t0
        drv.wait(10)
    finally:
        if drv.poll() is None:
            drv.kill()
            drv.wait()
    # the member killed its workers, and serves nobody meanwhile
    assert wait_gone(worker, 5)
    # a head again on the same port and token: the member joins it, as a new node
    cluster.head.start()
    nodes = cluster.wait_alive(2, timeout=8)
    assert nodes[M1] != ids[M1] and nodes[HEAD_IP] != ids[HEAD_IP]
    r = run_driver(MEMBER_DRIVER, driver_env(member), timeout=40)
    assert r.returncode == 0, r.stderr + cluster.logs()
    assert json.loads(r.stdout.split("RESULT ", 1)[1])["me"] == nodes[M1]
    cluster.head.expect_signal = True


# --- authentication ---


def test_garbage_and_oversized_frames_are_refused(cluster):
    before = cluster.node_table()
    garbage = RawPeer(HEAD_IP, cluster.port)
    challenge = garbage.read_frame()
    assert challenge[:2] == [2, "challenge"] and len(challenge[2]["nonce"]) == 32
    garbage.send(b"\x00\x00\x00\x10" + os.urandom(16))
    assert garbage.closed_by_peer(3)
    huge = RawPeer(HEAD_IP, cluster.port)
    huge.read_frame()
    huge.send((1 << 20).to_bytes(4, "big") + b"\x92" * 4096)  # 1 MiB announced before auth
    assert huge.closed_by_peer(3)
    wrong_op = RawPeer(HEAD_IP, cluster.port)
    wrong_op.read_frame()
    wrong_op.push("join", {"node_id": b"\1" * 28, "node_ip": "127.0.0.9"})  # join without auth
    assert wrong_op.closed_by_peer(3)
    assert cluster.node_table() == before


def test_bad_mac_is_refused(cluster):
    peer = RawPeer(HEAD_IP, cluster.port)
    nonce = peer.read_frame()[2]["nonce"]
    mine = os.urandom(32)
    wrong_key = node_mac(os.urandom(32), nonce, mine)
    peer.push("auth", {"nonce": mine, "mac": wrong_key})
    reply = peer.read_frame(3)
    assert reply is None or reply[1] != "auth_ok", reply
    assert peer.closed_by_peer(3)
    # a MAC of the wrong length, and none at all
    for params in ({"nonce": mine, "mac": wrong_key[:16]}, {"nonce": mine}):
        p = RawPeer(HEAD_IP, cluster.port)
        p.read_frame()
        p.push("auth", params)
        assert p.closed_by_peer(3)
    assert len(cluster.node_table()) == 2


def test_good_mac_and_replayed_answer(cluster):
    token = read_token(cluster.token_file)
    # the right answer to this challenge: the head proves itself back
    first = RawPeer(HEAD_IP, cluster.port)
    nonce1 = first.read_frame()[2]["nonce"]
    mine = os.urandom(32)
    answer = push("auth", {"nonce": mine, "mac": node_mac(token, nonce1, mine), "stream": os.urandom(24)})
    first.send(answer)
    ok = first.read_frame(3)
    assert ok[:2] == [2, "auth_ok"], ok
    assert ok[2]["mac"] == head_mac(token, mine, ok[2]["nonce"]) and ok[2]["nonce"] == nonce1
    first.close()
    # the same bytes to a new challenge: refused
    second = RawPeer(HEAD_IP, cluster.port)
    nonce2 = second.read_frame()[2]["nonce"]
    assert nonce2 != nonce1
    second.send(answer)
    reply = second.read_frame(3)
    assert reply is None or reply[1] != "auth_ok", reply
    assert second.closed_by_peer(3)
    assert len(cluster.node_table()) == 2


def test_member_with_wrong_token_is_refused(cluster, tmp_path):
    wrong = tmp_path / "wrong.token"
    wrong.write_text(os.urandom(32).hex() + "\n")
    wrong.chmod(0o600)
    before = cluster.alive_nodes()
    intruder = cluster.add_member(ip="127.0.0.9", token_file=str(wrong), wait=False)
    # it retries every second; the head refuses each time
    assert wait_until(
        lambda: intruder.read_log().count("head failed authentication") + intruder.read_log().count("closed") >= 1, 5
    ), intruder.read_log()
    time.sleep(1.5)
    assert cluster.alive_nodes() == before
    assert all(n["node_ip"] != "127.0.0.9" for n in cluster.node_table())
    assert "did not prove it holds the cluster token" in cluster.head.read_log()


def test_silent_peer_is_dropped(cluster):
    """A connection that never answers the challenge is closed after the
    handshake's time limit (5 s)."""
    peer = RawPeer(HEAD_IP, cluster.port)
    assert peer.read_frame()[1] == "challenge"
    assert peer.closed_by_peer(7)


def test_listener_bound_to_node_ip_only(make_cluster):
    c = make_cluster(members=0)
    port = f"{c.port:04X}"
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    listening = [r[1] for r in rows if r[3] == "0A" and r[1].endswith(":" + port)]
    assert listening == [f"0100007F:{port}"], listening
    with open("/proc/net/tcp6") as f:
        rows6 = [line.split() for line in f.readlines()[1:]]
    assert not [r[1] for r in rows6 if r[3] == "0A" and r[1].endswith(":" + port)]
    # another loopback address of this machine does not answer
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((M1, c.port), timeout=2).close()
    # the token file named but missing was made: 64 hex digits, mode 0600;
    # the join command is printed
    st = os.stat(c.token_file)
    assert st.st_mode & 0o777 == 0o600
    assert len(read_token(c.token_file)) == 32
    assert f"beamd --address {HEAD_IP}:{c.port} --token-file {c.token_file}" in c.head.read_log()


# --- nodes that come and go ---


def test_owner_on_dead_member_takes_its_actors_elsewhere(cluster):
    """A driver's actors live as long as it does: when its node dies, the
    actors it made on other nodes go too (their owner is gone)."""
    drv = _start_driver(cluster.members[0], LOOPING_DRIVER.replace("127.0.0.2", "127.0.0.1"))
    try:
        worker = int(read_line(drv, "WORKER ", timeout=20))
        assert worker in beam_processes(cluster.head.socket)
        cluster.members[0].kill9()
        assert wait_gone(worker, 5)
        # and the driver itself learns its node is gone
        assert read_line(drv, "RAISED ", timeout=5).split()[0] in (
            "ray.exceptions.RaySystemError",
            "builtins.ConnectionError",
        )
    finally:
        drv.kill()
        drv.wait()
    cluster.members[0].expect_signal = True


def test_waiting_actors_go_to_a_node_that_joins_later(cluster):
    """An actor that needs a node not in the cluster yet waits (as an
    infeasible task waits in Ray) and runs once such a node joins; a member
    started before its head joins once the head is up."""
    ray = _init(cluster)
    a = _where_class(ray).options(num_gpus=0, **_on(M2)).remote()
    ref = a.where.remote()
    assert ray.wait([ref], timeout=0.3)[0] == []
    late = cluster.add_member(ip=M2)
    assert ray.get(ref, timeout=15)["node_id"] == cluster.node_id(late)


def test_member_started_before_its_head(make_cluster):
    c = make_cluster(members=0, start=False)
    with open(os.open(c.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(os.urandom(32).hex() + "\n")  # the head uses a token file that exists
    early = c.member_node()
    early.start(wait_ready=False)  # no head yet: it is not ready until it joins
    time.sleep(0.3)
    assert early.alive()
    c.head.start()
    nodes = c.wait_alive(2, timeout=5)
    c.members.append(early)
    r = run_driver(MEMBER_DRIVER, driver_env(early), timeout=40)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.split("RESULT ", 1)[1])["me"] == nodes[M1]


def test_dead_nodes_do_not_fill_the_cluster(cluster):
    token = read_token(cluster.token_file)
    for i in range(260):  # short-lived nodes, as a flapping machine rejoining makes
        p = RawPeer(HEAD_IP, cluster.port)
        tx = p.authenticate(token)
        p.send(
            tx.seal_frame(
                [
                    2,
                    "join",
                    {
                        "node_id": os.urandom(28),
                        "node_ip": f"127.0.1.{i % 250 + 1}",
                        "hostname": "flap",
                        "socket": "/nonexistent",
                        "resources": [["CPU", 10000]],
                        "gpus": [],
                    },
                ]
            )
        )
        p.sock.settimeout(5)
        assert p.sock.recv(4096)  # the sealed welcome (a refused join would be closed instead)
        p.close()
    # a real node can still join
    late = cluster.member_node(ip=M2).start()
    cluster.members.append(late)
    assert wait_until(lambda: M2 in cluster.alive_nodes(), 3), late.read_log()[-500:]


# --- placement groups when a node dies ---


def _lose_a_bundle(c):
    ray = _init(c)
    placement_group, table, remove, S = _pg()
    ids = c.alive_nodes()
    pg = placement_group([{"GPU": 1}] * 2, strategy="STRICT_SPREAD")
    assert pg.wait(10)
    where = table(pg)["bundles_to_node_id"]
    on_member = [i for i, n in where.items() if n == ids[M1]][0]
    Where = _where_class(ray)
    survivor = Where.options(scheduling_strategy=S(pg, placement_group_bundle_index=1 - on_member)).remote()
    assert ray.get(survivor.where.remote(), timeout=15)["node_id"] == ids[HEAD_IP]
    c.members[0].kill9()
    c.members[0].expect_signal = True
    assert c.wait_dead(ids[M1], 3)
    assert wait_until(lambda: table(pg)["state"] == "RESCHEDULING", 3)
    # the bundle on the live node keeps its actor
    assert ray.get(survivor.where.remote(), timeout=10)["node_id"] == ids[HEAD_IP]
    return ray, pg, on_member, ids, survivor


def test_group_with_a_bundle_on_a_dead_node_is_rescheduling(cluster):
    ray, pg, lost, ids, survivor = _lose_a_bundle(cluster)
    S = _pg()[3]
    # an actor for the lost bundle waits (the bundle has no node)
    waiting = _where_class(ray).options(num_gpus=0, scheduling_strategy=S(pg, placement_group_bundle_index=lost))
    waiter = waiting.remote()  # (a method holds its handle weakly, as Ray's)
    ref = waiter.where.remote()
    assert ray.wait([ref], timeout=0.5)[0] == []
    # removing the group kills the survivor and frees the head's GPU
    _pg()[2](pg)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(survivor.where.remote(), timeout=10)
    assert wait_until(lambda: ray.available_resources().get("GPU") == 2.0, 5)


def test_surviving_bundles_take_new_actors(cluster):
    ray, pg, lost, ids, survivor = _lose_a_bundle(cluster)
    S = _pg()[3]
    fresh = _where_class(ray).options(num_gpus=0, scheduling_strategy=S(pg, placement_group_bundle_index=1 - lost))
    placed = fresh.remote()
    assert ray.get(placed.where.remote(), timeout=2)["node_id"] == ids[HEAD_IP]


def test_lost_bundles_are_placed_again(cluster):
    ray, pg, lost, ids, survivor = _lose_a_bundle(cluster)
    table, S = _pg()[1], _pg()[3]
    assert table(pg)["bundles_to_node_id"][lost] != ids[M1]
    late = cluster.add_member(ip=M2)
    assert wait_until(lambda: table(pg)["state"] == "CREATED", 5), table(pg)
    assert table(pg)["bundles_to_node_id"][lost] == cluster.node_id(late)
    there = _where_class(ray).options(scheduling_strategy=S(pg, placement_group_bundle_index=lost)).remote()
    assert ray.get(there.where.remote(), timeout=15)["node_id"] == cluster.node_id(late)


# --- joining: names, readiness, a head that is not one ---


def test_address_may_be_a_host_name(cluster):
    node = cluster.member_node(ip=M2)
    cluster.redirect(node, f"localhost:{cluster.port}")
    node.start()
    cluster.members.append(node)
    assert wait_until(lambda: M2 in cluster.alive_nodes(), 5), node.read_log()


def test_member_is_ready_only_once_joined(make_cluster):
    import select

    c = make_cluster(members=0)
    c.head.signal(signal.SIGSTOP)  # it accepts (the kernel does) but never challenges
    node = c.member_node()
    c.members.append(node)
    r, w = os.pipe()
    try:
        with open(node.log_path, "ab") as log:
            node.proc = subprocess.Popen(
                node.args + ["--ready-fd", str(w)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(w,),
                env=node.env,
            )
        os.close(w)
        early = select.select([r], [], [], 1.0)[0]
        if early:
            # it said ready: then it must serve a driver
            out = run_driver("import ray; ray.init(); print('OK')", driver_env(node), timeout=5)
            assert out.returncode == 0, out.stderr[-500:]
    finally:
        c.head.signal(signal.SIGCONT)
        os.close(r)


def _fake_head(answer):
    """A listening socket that plays a head: challenge, read the member's
    auth, then answer(auth_params, head_nonce) -> auth_ok params. Returns
    (port, results) where results gets what the member sent after."""
    import threading

    srv = socket.socket()
    srv.bind((HEAD_IP, 0))
    srv.listen(4)
    srv.settimeout(5)
    results = []

    def run():
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            nonce, body = challenge(FrameSocket(conn))
            if body is None:
                return
            auth = unpack(body)[0]
            results.append(auth)
            conn.sendall(push("auth_ok", answer(auth[2], nonce)))
            after = b""
            try:
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    after += chunk
            except OSError:
                pass
            results.append(after)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv, t, results


@pytest.mark.parametrize("kind", ["wrong_key", "reflected"])
def test_member_refuses_a_head_without_the_token(make_cluster, kind):
    """The member checks the head too: an auth_ok with a MAC made without the
    token, or the member's own MAC sent back, ends the link before join (the
    member's id, address and resources never leave it)."""
    c = make_cluster(members=0)
    if kind == "wrong_key":

        def answer(auth, nonce):
            return {"nonce": nonce, "mac": head_mac(os.urandom(32), auth["nonce"], nonce)}
    else:

        def answer(auth, nonce):
            return {"nonce": auth["nonce"], "mac": auth["mac"]}

    srv, t, results = _fake_head(answer)
    try:
        node = c.member_node(ip=M1)
        c.redirect(node, f"{HEAD_IP}:{srv.getsockname()[1]}")
        node.start(wait_ready=False)  # a fake head never welcomes it
        c.members.append(node)
        t.join(8)
        assert not t.is_alive() and len(results) == 2, results
        auth, after = results
        assert auth[:2] == [2, "auth"] and len(auth[2]["mac"]) == 32
        assert b"join" not in after and b"node_ip" not in after, after[:200]
        assert "did not prove it holds the cluster token" in node.read_log()
    finally:
        srv.close()


def test_an_oversized_frame_fails_one_call_not_the_node(make_cluster):
    c = make_cluster(members=0)
    member = c.add_member(extra=["--max-frame", str(1 << 20)])
    ray = _init(c)
    ids = c.alive_nodes()

    @ray.remote(num_cpus=0)
    class Size:
        def size(self, b):
            return len(b)

    a = Size.options(**_on(M1)).remote()
    assert ray.get(a.size.remote(b"x"), timeout=15) == 1
    try:
        ray.get(a.size.remote(b"x" * (2 << 20)), timeout=5)
    except ray.exceptions.RayError:
        pass  # refusing the big call is fine; taking the node down is not
    assert c.alive_nodes().get(M1) == ids[M1], member.read_log()[-800:]
    assert ray.get(a.size.remote(b"y"), timeout=5) == 1


def test_frames_after_the_handshake_must_be_sealed(cluster):
    """Past the handshake every frame is sealed (secretstream keyed from the
    token and both nonces): a plain join, or a sealed one with a flipped
    byte, ends the link and joins nothing."""
    token = read_token(cluster.token_file)
    before = len(cluster.node_table())
    join = [
        2,
        "join",
        {
            "node_id": os.urandom(28),
            "node_ip": "127.0.1.77",
            "hostname": "x",
            "socket": "/nonexistent",
            "resources": [["CPU", 10000]],
            "gpus": [],
        },
    ]
    for tamper in ("plain", "flipped"):
        p = RawPeer(HEAD_IP, cluster.port)
        tx = p.authenticate(token)
        if tamper == "plain":
            p.send(message(join))
        else:
            sealed = bytearray(tx.seal_frame(join))
            sealed[20] ^= 1
            p.send(bytes(sealed))
        assert p.closed_by_peer(3), tamper
    assert len(cluster.node_table()) == before
    assert "a frame failed authentication" in cluster.head.read_log()


def test_remove_placement_group_is_bounded_when_a_member_stops_answering(make_cluster):
    """remove_placement_group waited for the group's workers to be gone, so
    with a member SIGSTOPped it blocked until that member was declared dead
    (--node-timeout). Ray's returns at once and removes in the background:
    beam's returns within its bound (1 s), and the removal completes once
    the member answers again (its worker killed, the bundle's GPU back)."""
    c = make_cluster(node_timeout=8)
    ray = _init(c)
    placement_group, table, remove, Strategy = _pg()
    pg = placement_group([{"GPU": 1, f"node:{M1}": 0.001}])
    assert pg.wait(10)
    Where = _where_class(ray)
    a = Where.options(scheduling_strategy=Strategy(placement_group=pg)).remote()
    pid = ray.get(a.pid.remote(), timeout=15)
    member = c.members[0]
    member.signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        remove(pg)
        took = time.monotonic() - t0
    finally:
        member.signal(signal.SIGCONT)
    print(f"remove_placement_group with a member stopped: {took:.2f} s (node timeout {c.node_timeout} s)")
    assert took < 2.0, took
    assert table(pg)["state"] == "REMOVED"
    assert wait_gone(pid, 10)
    assert wait_until(lambda: ray.available_resources().get("GPU") == 4.0, 10), ray.available_resources()
    assert len(c.alive_nodes()) == 2  # the member was never lost
