# SPDX-License-Identifier: Apache-2.0
"""beamctl status: placement groups, nodes and resources in the human view
(against a real beamd), both status shapes (a lone daemon's top-level node,
a cluster head's `nodes` array; served by a stand-in daemon), and the
command line's errors: --help, usage, no daemon, a daemon that never answers."""

import json
import os
import socket
import subprocess
import threading
import time

import pytest

from beamkit.pg import pg_api
from beamkit.procs import state, wait_until
from beamkit.wire import FrameSocket, message


def _beamctl(*args, env=None, timeout=10):
    return subprocess.run([os.environ["BEAM_BEAMCTL"], *args], capture_output=True, text=True, timeout=timeout, env=env)


def _group_block(text, pg_hex):
    """The group's row and its bundle lines."""
    lines = text.splitlines()
    (i,) = [n for n, line in enumerate(lines) if pg_hex in line]
    block = [lines[i]]
    for line in lines[i + 1 :]:
        if not line.startswith("    bundle") and not line.startswith("    ..."):
            break
        block.append(line)
    return block


def _is_gpu_total(line):
    """The GPU row of a node's resources (not one of its per-device rows)."""
    parts = line.split()
    return len(parts) > 1 and parts[0] == "GPU" and parts[1].startswith("[")


def test_status_shows_placement_groups(ray_start, beamd):
    ray = ray_start
    api = pg_api()
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    placed = api.placement_group(
        [{"GPU": 1, "node:127.0.0.1": 0.001}, {"GPU": 0.5}], strategy="STRICT_PACK", name="shown-pg"
    )
    assert placed.wait(10)
    pending = api.placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_SPREAD")

    @ray.remote(num_cpus=0, num_gpus=0.5)
    class InGroup:
        def ping(self):
            return 1

    a = InGroup.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placed, 1)).remote()
    try:
        ray.get(a.ping.remote(), timeout=10)
    except ray.exceptions.GetTimeoutError:
        # seen once in five stressed suite runs (issue 21), not reproduced
        # since (60 runs under stress-ng: 0.18 s at most): what beamd and the
        # workers were doing, for the next time
        st = beamd.status()
        procs = {x["pid"]: state(x["pid"]) for x in st["actors"] if x.get("pid")}
        raise AssertionError(
            f"first ping timed out; actors {st['actors']}; worker states {procs}\n{beamd.read_log()[-6000:]}"
        ) from None

    out = _beamctl("--socket", beamd.socket, "status")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    text = out.stdout
    st = beamd.status()
    node_id = st["node_id"]
    assert "Placement groups (2)" in text

    row, *bundles = _group_block(text, placed.id.hex())
    assert row.split()[1:] == ["STRICT_PACK", "CREATED", "shown-pg"]
    assert len(bundles) == 2
    assert "GPU=1" in bundles[0] and "node:127.0.0.1=0.001" in bundles[0]
    assert "GPU=0.5" in bundles[1]
    for b in bundles:
        assert "-> 127.0.0.1" in b and node_id[:12] in b

    row, *bundles = _group_block(text, pending.id.hex())
    assert row.split()[1:] == ["STRICT_SPREAD", "PENDING", "-"]
    assert len(bundles) == 2 and all("(not placed)" in b for b in bundles)

    # the actor in the group, with its GPU share, on the node
    (arow,) = [line for line in text.splitlines() if a._actor_id.hex() in line]
    assert "InGroup" in arow and "ALIVE" in arow and node_id[:12] in arow
    # resources: the group's reservation shows as used
    (gpu_row,) = [line for line in text.splitlines() if _is_gpu_total(line)]
    assert "1.5/4" in gpu_row
    # and per device: the 1-GPU bundle has device 0, the half bundle half of device 1
    devices = [line.split() for line in text.splitlines() if line.split()[:1] == ["GPU"] and not _is_gpu_total(line)]
    assert [(d[1], d[3]) for d in devices] == [("0", "1/1"), ("1", "0.5/1"), ("2", "0/1"), ("3", "0/1")]
    assert "Nodes (1)" in text and node_id in text

    # removed: the state says so at once; the bundles go back once the
    # group's actor is gone (Ray's removal is asynchronous): wait for both
    api.remove_placement_group(placed)

    def removed_block():
        out = _beamctl("--socket", beamd.socket, "status")
        assert out.returncode == 0, out.stderr
        return _group_block(out.stdout, placed.id.hex())

    def removed_and_freed():
        row, *bundles = removed_block()
        return row.split()[2] == "REMOVED" and all("(not placed)" in b for b in bundles)

    assert wait_until(removed_and_freed, 30, 0.05), removed_block()
    row, *bundles = removed_block()
    assert row.split()[2] == "REMOVED" and len(bundles) == 2


def test_status_json_has_placement_groups(ray_start, beamd):
    api = pg_api()
    pg = api.placement_group([{"CPU": 1}, {"GPU": 2}], strategy="SPREAD", name="js")
    assert pg.wait(10)
    out = _beamctl("--socket", beamd.socket, "status", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    (g,) = [g for g in data["placement_groups"] if g["placement_group_id"] == pg.id.hex()]
    assert g["strategy"] == "SPREAD" and g["state"] == "CREATED" and g["name"] == "js"
    assert g["bundles"] == [{"CPU": 1.0}, {"GPU": 2.0}]
    assert g["bundles_to_node_id"] == [data["node_id"]] * 2


def test_many_bundles_are_cut_short(ray_start, beamd):
    api = pg_api()
    pg = api.placement_group([{"CPU": 0.01}] * 40)
    assert pg.wait(10)
    text = _beamctl("--socket", beamd.socket, "status").stdout
    block = _group_block(text, pg.id.hex())
    assert len([b for b in block if b.strip().startswith("bundle")]) == 32
    assert block[-1].strip() == "... and 8 more bundles"


# --- a stand-in daemon, for shapes a lone beamd does not send ---


class StandIn:
    """Listens on a unix socket and answers hello and status with canned
    maps (or, with status=None, reads and never answers)."""

    def __init__(self, path, status):
        self.status = status
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            frames = FrameSocket(conn)
            while True:
                try:
                    frame = frames.read_body()
                except OSError:
                    return
                if frame is None:
                    return
                assert frame[0] == 0x94 and frame[1] == 0  # [0, msgid, op, params]
                msgid = frame[2]
                if self.status is None:
                    continue
                result = {"node_id": "n" * 56} if msgid == 1 else self.status
                conn.sendall(message([1, msgid, None, result]))

    def close(self):
        self.sock.close()


def _node(node_id, ip, alive=True, head=False, gpus=2, used=0.0):
    return {
        "node_id": node_id,
        "node_ip": ip,
        "hostname": f"host-{ip}",
        "is_head": 1 if head else 0,
        "alive": alive,
        "death": "" if alive else "health check failed",
        "socket": "/x",
        "resources_total": {"CPU": 8.0, "GPU": float(gpus), f"node:{ip}": 1.0},
        "resources_available": {"CPU": 8.0, "GPU": gpus - used, f"node:{ip}": 1.0},
        "gpus": [{"id": str(i), "available": 1.0 if i else 1.0 - used} for i in range(gpus)],
    }


A, B = "a" * 56, "b" * 56


def _cluster_status():
    head = _node(A, "10.0.0.1", head=True, used=1.0)
    dead = _node(B, "10.0.0.2", alive=False)
    st = dict(head)
    st.update(
        {
            "nodes": [head, dead],
            "pid": 4242,
            "uptime_ms": 1500,
            "socket": "/x",
            "version": "0.1.0",
            "actors": [
                {
                    "actor_id": "c" * 32,
                    "class_name": "Far",
                    "state": "DEAD",
                    "pid": 0,
                    "node_id": B,
                    "gpu_ids": [],
                    "name": "",
                },
                {
                    "actor_id": "d" * 32,
                    "class_name": "Near",
                    "state": "ALIVE",
                    "pid": 77,
                    "node_id": A,
                    "gpu_ids": ["0", "1"],
                    "name": "",
                },
            ],
            "placement_groups": [
                {
                    "placement_group_id": "e" * 36,
                    "name": "spread-pg",
                    "strategy": "STRICT_SPREAD",
                    "state": "RESCHEDULING",
                    "bundles": [{"GPU": 1.0}, {"GPU": 1.0}],
                    "bundles_to_node_id": [A, ""],
                }
            ],
            "objects": {"count": 3, "bytes": 3 << 20},
            "clients": {"drivers": 1, "workers": 1, "ctl": 1},
        }
    )
    return st


def test_cluster_shape_uses_the_nodes_array(tmp_path):
    path = str(tmp_path / "s.sock")
    standin = StandIn(path, _cluster_status())
    try:
        out = _beamctl("--socket", path, "status")
    finally:
        standin.close()
    assert out.returncode == 0, out.stderr
    text = out.stdout
    lines = text.splitlines()
    assert "Nodes (2)" in text
    (ra,) = [line for line in lines if line.strip().startswith(A)]
    (rb,) = [line for line in lines if line.strip().startswith(B)]
    assert ra.split()[1:4] == ["10.0.0.1", "yes", "yes"]
    assert rb.split()[1:4] == ["10.0.0.2", "no", "no"]
    assert "died: health check failed" in text
    # resources per node
    assert f"node {A[:12]} 10.0.0.1" in text and f"node {B[:12]} 10.0.0.2 (dead)" in text
    assert sum(1 for line in lines if _is_gpu_total(line)) == 2
    # the group's bundles name their node's ip
    row, *bundles = _group_block(text, "e" * 36)
    assert row.split()[1:] == ["STRICT_SPREAD", "RESCHEDULING", "spread-pg"]
    assert "-> 10.0.0.1 " + A[:12] in bundles[0]
    assert "(not placed)" in bundles[1]
    (near,) = [line for line in lines if "d" * 32 in line]
    assert "0,1" in near and A[:12] in near and "77" in near
    assert "Objects: 3 (3145728 bytes, 3.0 MiB)" in text


def test_lone_daemon_shape_without_nodes(tmp_path):
    st = _cluster_status()
    del st["nodes"]
    path = str(tmp_path / "s.sock")
    standin = StandIn(path, st)
    try:
        out = _beamctl("--socket", path, "status")
    finally:
        standin.close()
    assert out.returncode == 0, out.stderr
    assert "Nodes (1)" in out.stdout
    assert A in out.stdout and B + " " not in out.stdout
    # the JSON view passes the map through as it came
    standin = StandIn(path + "2", st)
    try:
        js = _beamctl("--socket", path + "2", "status", "--json")
    finally:
        standin.close()
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["placement_groups"][0]["state"] == "RESCHEDULING"


def test_daemon_that_never_answers_times_out(tmp_path):
    path = str(tmp_path / "s.sock")
    standin = StandIn(path, None)
    try:
        t0 = time.monotonic()
        out = _beamctl("--socket", path, "--timeout", "0.5", "status")
        took = time.monotonic() - t0
    finally:
        standin.close()
    assert out.returncode == 1
    assert out.stdout == ""
    assert "no answer from beamd at " + path in out.stderr
    assert took < 5


# --- the command line ---


def test_help_and_usage_errors(tmp_path):
    for flag in ("--help", "-h"):
        out = _beamctl(flag)
        assert out.returncode == 0, out.stderr
        for word in ("status", "--json", "--socket", "--timeout", "placement"):
            assert word in out.stdout, word
        assert out.stderr == ""
    for args in (
        (),
        ("status", "extra"),
        ("--timeout", "0", "status"),
        ("--timeout", "x", "status"),
        ("--bogus", "status"),
        ("frobnicate",),
    ):
        out = _beamctl("--socket", str(tmp_path / "none.sock"), *args)
        assert out.returncode == 2, (args, out)
        assert out.stdout == ""
        assert "usage" in out.stderr or "beamctl:" in out.stderr


def test_stale_socket_file(tmp_path):
    """A socket file left by a daemon that is gone: refused, said plainly."""
    path = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays, nobody listens
    out = _beamctl("--socket", path, "status")
    assert out.returncode == 1
    assert out.stdout == ""
    assert "no beamd answers at " + path in out.stderr
    assert "refused" in out.stderr.lower()


@pytest.mark.parametrize("args", [("status",), ("status", "--json")])
def test_daemon_gone_mid_session(tmp_path, args):
    """The daemon closes the connection before answering."""
    path = str(tmp_path / "s.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        conn.recv(100)
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        out = _beamctl("--socket", path, *args)
    finally:
        t.join(5)
        srv.close()
    assert out.returncode == 1
    assert out.stdout == ""
    assert "closed the connection" in out.stderr and path in out.stderr
