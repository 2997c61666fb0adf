# SPDX-License-Identifier: Apache-2.0
"""The cluster across network namespaces: the head in one, a member in
another, joined by a veth pair with addresses in 10.213.N.0/24 that exist
only inside those two namespaces (no route to or from anywhere else, so no
packet leaves them). The driver runs in the head's namespace.

Needs root and `ip netns`; skipped otherwise. The namespaces are always
deleted, whatever the test did."""

import json
import os
import subprocess
import textwrap
import time

import pytest

from beamkit.daemon import Cluster, driver_env, start_driver
from beamkit.netns import NetnsPair, needs_netns
from beamkit.procs import wait_gone, wait_until

pytestmark = needs_netns


@pytest.fixture
def netns_cluster():
    pair = NetnsPair()
    c = None
    try:
        c = Cluster(
            members=0, head_ip=pair.ip_a, port=20000 + os.getpid() % 20000, wrap_head=pair.wrap(pair.a), start=False
        )
        c.head.start()
        member = c.member_node(ip=pair.ip_b, wrap=pair.wrap(pair.b))
        member.start()
        c.members.append(member)
        c.wait_alive(2)
        yield pair, c
    finally:
        try:
            if c is not None:
                c.close()
        finally:
            pair.close()
            left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            assert pair.a not in left and pair.b not in left, left


DRIVER = textwrap.dedent("""
    import json, os, sys, time, ray
    from ray.util import get_node_ip_address
    ray.init()

    @ray.remote(num_cpus=0, num_gpus=1)
    class Where:
        def where(self):
            return {"node_id": ray.get_runtime_context().get_node_id(), "ip": get_node_ip_address(),
                    "gpus": ray.get_gpu_ids(), "pid": os.getpid(), "netns": os.stat("/proc/self/ns/net").st_ino}

        def add(self, i):
            return i + 1

    out = {"me": ray.get_runtime_context().get_node_id(), "ip": get_node_ip_address(),
           "nodes": {n["NodeManagerAddress"]: [n["NodeID"], n["Alive"]] for n in ray.nodes()}}
    a = Where.options(resources={"node:%(member_ip)s": 0.001}).remote()
    out["where"] = ray.get(a.where.remote(), timeout=20)
    out["sums"] = ray.get([a.add.remote(i) for i in range(100)], timeout=20)
    sys.stdout.write("RESULT " + json.dumps(out) + "\\n")
    sys.stdout.flush()
    if %(linger)s:
        try:
            while True:
                ray.get(a.add.remote(0), timeout=30)
                time.sleep(0.01)
        except Exception as e:
            print("RAISED", type(e).__name__, str(e).replace("\\n", " "), flush=True)
""")


def test_cross_namespace_call_and_nodes(netns_cluster):
    pair, c = netns_cluster
    ids = c.alive_nodes()
    assert set(ids) == {pair.ip_a, pair.ip_b}
    p = start_driver(DRIVER % {"member_ip": pair.ip_b, "linger": False}, env=driver_env(c.head), wrap=pair.wrap(pair.a))
    out, err = p.communicate(timeout=40)
    assert p.returncode == 0, err + c.logs()
    r = json.loads(out.split("RESULT ", 1)[1])
    assert r["me"] == ids[pair.ip_a] and r["ip"] == pair.ip_a
    assert r["nodes"] == {ip: [nid, True] for ip, nid in ids.items()}
    w = r["where"]
    assert w["node_id"] == ids[pair.ip_b] and w["ip"] == pair.ip_b and len(w["gpus"]) == 1
    # the worker really runs in the member's namespace
    assert w["netns"] == pair.netns_inode(pair.b) != pair.netns_inode(pair.a)
    assert r["sums"] == list(range(1, 101))
    # the head listens on its address in its namespace, and nowhere else
    tcp = subprocess.run(pair.wrap(pair.a) + ["cat", "/proc/net/tcp"], capture_output=True, text=True).stdout
    port = f"{c.port:04X}"
    listening = [r.split()[1] for r in tcp.splitlines()[1:] if r.split()[3] == "0A" and r.split()[1].endswith(port)]
    want = "".join(f"{int(x):02X}" for x in reversed(pair.ip_a.split(".")))
    assert listening == [f"{want}:{port}"], listening


def test_partition_kills_the_node_and_it_rejoins(netns_cluster):
    """The veth goes down: no EOF, only silence. The head declares the
    member dead within the timeout (its actors die); the member gives up on
    the head too and kills its workers; when the link is back it joins again
    as a new node."""
    pair, c = netns_cluster
    ids = c.alive_nodes()
    p = start_driver(DRIVER % {"member_ip": pair.ip_b, "linger": True}, env=driver_env(c.head), wrap=pair.wrap(pair.a))
    try:
        line = ""
        deadline = time.monotonic() + 30
        while not line.startswith("RESULT ") and time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
        assert line.startswith("RESULT "), p.stderr.read() if p.poll() is not None else "no RESULT"
        worker = json.loads(line[7:])["where"]["pid"]
        t0 = time.monotonic()
        pair.link(False)
        raised = p.stdout.readline()
        took = time.monotonic() - t0
        assert raised.startswith("RAISED ActorDiedError") and "node has died" in raised, raised
        assert c.node_timeout * 0.9 <= took <= 2 * c.node_timeout + 1, took
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    assert c.wait_dead(ids[pair.ip_b], 1)
    # the member, cut off, stops its workers
    assert wait_gone(worker, 2 * c.node_timeout + 2)
    pair.link(True)
    assert wait_until(lambda: pair.ip_b in c.alive_nodes(), 8), c.logs()
    assert c.alive_nodes()[pair.ip_b] != ids[pair.ip_b]
    p = start_driver(DRIVER % {"member_ip": pair.ip_b, "linger": False}, env=driver_env(c.head), wrap=pair.wrap(pair.a))
    out, err = p.communicate(timeout=40)
    assert p.returncode == 0, err
    assert json.loads(out.split("RESULT ", 1)[1])["where"]["node_id"] == c.alive_nodes()[pair.ip_b]
