# SPDX-License-Identifier: Apache-2.0
"""ray.cluster_utils.Cluster: several nodes of one cluster on this machine,
as Ray's own multi-node tests make them (the ``ray_start_cluster`` fixture).

The first node added is the head (a beamd with ``--head`` on 127.0.0.1 and a
free port); each later one is a member that joins it over TCP, on the next
loopback address (127.0.0.2, ...), with a cluster token made for this cluster
alone. As Ray's Cluster writes the head's address for ray.init, this one
leaves the head's session in Ray's temp folder, as ``ray start --head`` does:
``ray.init()``, ``address="auto"``, ``address=cluster.address`` and
``RAY_ADDRESS=<cluster.address>`` all connect to the head. shutdown() stops
every node (members first) and removes the session; with shutdown_at_exit
(the default) the nodes also exit with this process.

Differences from Ray: every node has an address of its own (Ray's share the
machine's IP), and a node's arguments are those beamd has (num_cpus,
num_gpus, resources, memory, object_store_memory); Ray's tuning arguments
(ports, _system_config, dashboard, redis) are accepted and have no effect."""

import os
import secrets
import shutil
import socket
import tempfile
import time

import ray
from ray._private import node as _node

# beamd's sizes for a node, from add_node's keyword arguments
_SIZES = ("num_cpus", "num_gpus", "memory", "object_store_memory")
# Ray's RayParams arguments that mean nothing to beam: accepted, unused
_IGNORED = frozenset(
    (
        "_system_config",
        "system_config",
        "min_worker_port",
        "max_worker_port",
        "node_manager_port",
        "object_manager_port",
        "dashboard_agent_listen_port",
        "dashboard_port",
        "include_dashboard",
        "include_log_monitor",
        "redis_address",
        "redis_username",
        "redis_password",
        "gcs_address",
        "enable_object_reconstruction",
        "env_vars",
        "labels",
        "node_name",
        "namespace",
    )
)
START_TIMEOUT_S = 30.0


class ClusterNode:
    """One node of a Cluster: its beamd process, socket and address."""

    def __init__(self, name, folder, ip, proc, socket_path, node_id, head):
        self.name = name
        self.dir = folder
        self.node_ip_address = ip
        self.proc = proc
        self.socket = socket_path
        self.node_id = node_id
        self.unique_id = node_id
        self.head = head

    @property
    def address(self):
        return self.node_ip_address

    def remaining_processes_alive(self):
        return self.proc.poll() is None

    def any_processes_alive(self):
        return self.remaining_processes_alive()

    def __repr__(self):
        return f"ClusterNode({self.name}, {self.node_ip_address}, pid {self.proc.pid})"


def _free_port(ip):
    s = socket.socket()
    try:
        s.bind((ip, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _node_args(node_args):
    """beamd's arguments for add_node's keyword arguments; TypeError for a
    keyword Ray's RayParams does not take either."""
    args = []
    sizes = {"num_cpus": 1, "num_gpus": 0}
    for key, value in node_args.items():
        if key in _SIZES:
            if value is not None:
                sizes[key] = value
        elif key == "resources":
            for name, amount in (value or {}).items():
                args += ["--resource", f"{name}={amount}"]
        elif key not in _IGNORED:
            raise TypeError(f"add_node() got an unexpected keyword argument '{key}'")
    for key, value in sizes.items():
        if value is not None:
            if value < 0:
                raise ValueError(f"{key} must be non-negative, got {value}")
            args += ["--" + key.replace("_", "-"), str(int(value) if key == "num_gpus" else value)]
    return args


class Cluster:
    def __init__(self, initialize_head=False, connect=False, head_node_args=None, shutdown_at_exit=True):
        if not initialize_head and connect:
            raise RuntimeError("Cannot connect to uninitialized cluster.")
        self.head_node = None
        self.worker_nodes = set()
        self.connected = False
        self._shutdown_at_exit = shutdown_at_exit
        self._temp_root = _node.ray_temp_dir()
        self._dir = None
        self._token_file = None
        self._port = None
        self._next_ip = 2
        if initialize_head:
            self.add_node(**(head_node_args or {}))
            if connect:
                self.connect()

    # --- Ray's Cluster API ---

    @property
    def gcs_address(self):
        if self.head_node is None:
            return None
        return f"{self.head_node.node_ip_address}:{self._port}"

    @property
    def address(self):
        return self.gcs_address

    def connect(self, namespace=None):
        """Connects this process's driver to the cluster."""
        assert self.address is not None
        assert not self.connected
        ray.init(namespace=namespace, ignore_reinit_error=True, address=self.address)
        self.connected = True

    def add_node(self, wait=True, **node_args):
        """Starts a node (the head when it is the first) and returns it; with
        wait, once the head lists it alive."""
        args = _node_args(node_args)
        if self.head_node is None:
            node = self._start_head(args)
            self.head_node = node
        else:
            ip = f"127.0.0.{self._next_ip}"
            self._next_ip += 1
            node = self._start(f"node{self._next_ip - 2}", ip, args + ["--address", self.gcs_address], head=False)
            self.worker_nodes.add(node)
        if wait:
            self._wait_for_node(node)
        return node

    def remove_node(self, node, allow_graceful=True):
        """Stops node's daemon (and so its workers); the head's removal also
        removes the session it left."""
        if node is self.head_node:
            self.head_node = None
        else:
            self.worker_nodes.discard(node)
        if allow_graceful:
            _node.stop_process(node.proc)
        else:
            node.proc.kill()
            node.proc.wait()
        if node.head:
            _node.remove_session(self._temp_root, node.proc.pid)

    def wait_for_nodes(self, timeout=30):
        """Waits until the head lists exactly as many live nodes as were added
        and not removed; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        expected = len(self.list_all_nodes())
        while time.monotonic() < deadline:
            if len(self._live_node_ids()) == expected:
                return
            time.sleep(0.1)
        raise TimeoutError("Timed out while waiting for nodes to join.")

    def list_all_nodes(self):
        nodes = list(self.worker_nodes)
        if self.head_node:
            nodes = [self.head_node] + nodes
        return nodes

    def remaining_processes_alive(self):
        return all(n.remaining_processes_alive() for n in self.list_all_nodes())

    def shutdown(self):
        """Removes every node, members first, and the cluster's folder."""
        for node in list(self.worker_nodes):
            self.remove_node(node)
        if self.head_node is not None:
            self.remove_node(self.head_node)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # --- beam's nodes ---

    def _start_head(self, args):
        try:
            running = _node.running_here(self._temp_root)
        except _node.SessionRefused as e:
            raise RuntimeError(str(e)) from None
        if running:
            raise RuntimeError(f"{running} (a Cluster's head takes this node's session)")
        os.makedirs(self._temp_root, mode=0o700, exist_ok=True)
        _node.trusted_path(self._temp_root, "Ray's temp folder", kind="folder")
        self._dir = tempfile.mkdtemp(prefix="cluster_", dir=self._temp_root)
        self._token_file = os.path.join(self._dir, "cluster.token")
        _node.write_atomic(self._token_file, secrets.token_hex(32) + "\n", 0o600)
        self._port = _free_port("127.0.0.1")
        node = self._start("head", "127.0.0.1", args + ["--head", "--port", str(self._port)], head=True)
        sess = {
            "pid": node.proc.pid,
            "socket": node.socket,
            "cluster": f"{node.node_ip_address}:{self._port}",
            "head": True,
            "node_ip": node.node_ip_address,
            "listen_ip": None,
            "session_dir": node.dir,
            "log": os.path.join(node.dir, "beamd.log"),
            "token_file": self._token_file,
            "block_pid": None,
            "temp_dir": self._temp_root,
        }
        _node.write_session(self._temp_root, sess)
        return node

    def _start(self, name, ip, args, head):
        exe = _node.beamd_path()
        if not exe:
            raise RuntimeError("beamd was not found (set BEAM_BEAMD or put beamd on PATH)")
        folder = os.path.join(self._dir, name)
        os.makedirs(folder, mode=0o700)
        sock = os.path.join(folder, "beamd.sock")
        log_path = os.path.join(folder, "beamd.log")
        argv = [exe, "--socket", sock, "--token-file", self._token_file, "--node-ip", ip, "--log-level", "warn"]
        if self._shutdown_at_exit:
            argv.append("--exit-with-parent")
        try:
            proc = _node.start_daemon(argv + args, log_path, START_TIMEOUT_S, own_group=True)
        except _node.DaemonStartFailed as e:
            raise RuntimeError(f"beamd {name} ({ip}) did not start ({e.why}):\n{e.log_tail}") from None
        hello, _ = _node.daemon_hello(sock, status=False)
        return ClusterNode(name, folder, ip, proc, sock, bytes(hello["node_id"]).hex(), head)

    def _live_node_ids(self):
        if self.head_node is None:
            return set()
        try:
            st = _node.daemon_status(self.head_node.socket)
        except (OSError, RuntimeError):
            return set()
        return {n["node_id"] for n in st.get("nodes", []) if n.get("alive")}

    def _wait_for_node(self, node, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.node_id in self._live_node_ids():
                return
            if node.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise TimeoutError(f"Timed out waiting for node {node.name} ({node.node_ip_address}) to join.")
