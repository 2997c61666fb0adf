# SPDX-License-Identifier: Apache-2.0
"""ray.cluster_utils.Cluster, the multi-node fixture of Ray's own tests
(``ray_start_cluster``): several nodes of one cluster on this machine, found
by ray.init through RAY_ADDRESS, "auto", the address given, or none (the
address Cluster leaves, as Ray 2.43's does). Ray public API only: the same
bodies pass on real Ray 2.43 (scripts/test_real_ray.sh)."""

import pytest

import ray
from beamkit.procs import wait_until
from ray.cluster_utils import Cluster


@pytest.fixture
def cluster():
    ray.shutdown()  # the module's instance, on real Ray
    c = Cluster()
    yield c
    ray.shutdown()
    c.shutdown()


def _has_cpus():
    return ray.cluster_resources().get("CPU", 0) > 0


@pytest.mark.ray_compat
def test_ray_address_environment_variable(cluster, monkeypatch):
    """Ray's test_ray_address_environment_variable, on the fixture it uses: a
    head with no CPUs tells a connection to it from a new local cluster."""
    cluster.add_node(num_cpus=0)
    address = cluster.address
    host, _, port = address.rpartition(":")
    assert host and port.isdigit()

    monkeypatch.setenv("RAY_ADDRESS", address)
    ray.init()
    assert not _has_cpus()
    ray.shutdown()

    monkeypatch.setenv("RAY_ADDRESS", "auto")
    ray.init()
    assert not _has_cpus()
    ray.shutdown()

    # an address given wins over RAY_ADDRESS (read only for none or "auto")
    monkeypatch.setenv("RAY_ADDRESS", "test")
    ray.init(address=address)
    assert not _has_cpus()
    ray.shutdown()

    # no RAY_ADDRESS, no address: the cluster's address the fixture left
    monkeypatch.delenv("RAY_ADDRESS")
    ray.init()
    assert not _has_cpus()
    ray.shutdown()

    # and "local" starts a new node of its own
    ray.init(address="local", num_cpus=1)
    assert _has_cpus()
    ray.shutdown()


def _alive_nodes():
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


@pytest.mark.ray_compat
def test_nodes_run_tasks_where_their_resources_are(cluster):
    head = cluster.add_node(num_cpus=1)
    member = cluster.add_node(num_cpus=1, resources={"member": 1})
    spare = cluster.add_node(num_cpus=0, resources={"spare": 1})
    cluster.wait_for_nodes()
    assert cluster.list_all_nodes()[0] is head
    assert len(cluster.list_all_nodes()) == 3
    cluster.connect()

    assert _alive_nodes() == {head.node_id, member.node_id, spare.node_id}
    res = ray.cluster_resources()
    assert res["CPU"] == 2 and res["member"] == 1 and res["spare"] == 1

    @ray.remote(num_cpus=0, resources={"member": 1})
    def where():
        return ray.get_runtime_context().get_node_id()

    assert ray.get(where.remote(), timeout=60) == member.node_id
    # (Ray's nodes share this machine's IP, and its driver may attach to any
    # of them; beam's driver talks to the head)
    driver_node = ray.get_runtime_context().get_node_id()
    assert driver_node in _alive_nodes()

    # a member removed (not the driver's: Ray refuses that): the cluster sees
    # it gone, and its resources with it
    gone, kept = (spare, member) if driver_node != spare.node_id else (member, spare)
    name = "spare" if gone is spare else "member"
    cluster.remove_node(gone)
    assert wait_until(lambda: _alive_nodes() == {head.node_id, kept.node_id}, 60, 0.1)
    assert wait_until(lambda: name not in ray.cluster_resources(), 60, 0.1)
    assert cluster.list_all_nodes() == [head, kept]


@pytest.mark.ray_compat
def test_connecting_an_uninitialized_cluster_is_refused():
    with pytest.raises(RuntimeError, match="uninitialized"):
        Cluster(connect=True)


def test_a_second_head_on_this_node_is_refused(cluster):
    """beam's own rule (Ray would write over the first's address): a head
    takes this node's session, so a second one, or a head beside a `ray
    start` node, is refused, and the first goes on serving."""
    cluster.add_node(num_cpus=1)
    other = Cluster()
    with pytest.raises(RuntimeError, match="already running on this node"):
        other.add_node(num_cpus=1)
    other.shutdown()
    assert cluster.remaining_processes_alive()
    cluster.connect()
    assert ray.cluster_resources()["CPU"] == 1
