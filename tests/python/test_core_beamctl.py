# SPDX-License-Identifier: Apache-2.0
"""beamctl status, human and --json, against a real beamd."""

import json
import os
import subprocess


def _beamctl(*args, env=None):
    return subprocess.run([os.environ["BEAM_BEAMCTL"], *args], capture_output=True, text=True, timeout=10, env=env)


def test_status_human_and_json(ray_start, beamd):
    ray = ray_start

    @ray.remote(num_gpus=1)
    class Shown:
        def pid(self):
            return os.getpid()

    a = Shown.options(name="shown-actor").remote()
    pid = ray.get(a.pid.remote())
    keep = ray.put(b"x" * 1000)

    out = _beamctl("--socket", beamd.socket, "status")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    st = beamd.status()
    assert st["node_id"] in text
    assert "127.0.0.1" in text
    assert "Actors (1)" in text
    (row,) = [line for line in text.splitlines() if a._actor_id.hex() in line]
    assert "Shown" in row and "ALIVE" in row and str(pid) in row
    assert "GPU" in text and "CPU" in text

    js = _beamctl("--socket", beamd.socket, "status", "--json")
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    assert data["node_id"] == st["node_id"]
    assert data["node_ip"] == "127.0.0.1"
    assert data["resources_total"]["GPU"] == 4 and data["resources_total"]["CPU"] == 8
    assert data["resources_available"]["GPU"] == 3
    (actor,) = data["actors"]
    assert actor["actor_id"] == a._actor_id.hex()
    assert actor["class_name"] == "Shown"
    assert actor["name"] == "shown-actor"
    assert actor["state"] == "ALIVE"
    assert actor["pid"] == pid
    assert len(actor["gpu_ids"]) == 1
    assert data["objects"]["count"] >= 1 and data["objects"]["bytes"] >= 1000
    assert data["clients"]["drivers"] == 1 and data["clients"]["workers"] == 1
    del keep


def test_status_uses_beam_socket_env(beamd):
    env = dict(os.environ, BEAM_SOCKET=beamd.socket)
    out = _beamctl("status", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["socket"] == beamd.socket


def test_status_without_daemon(tmp_path):
    missing = str(tmp_path / "none" / "beamd.sock")
    for args in (("status",), ("status", "--json")):
        out = _beamctl("--socket", missing, *args)
        assert out.returncode != 0
        assert out.stdout == ""
        assert missing in out.stderr
        assert "no beamd" in out.stderr


def test_usage_errors(beamd):
    out = _beamctl("--socket", beamd.socket, "no-such-command")
    assert out.returncode != 0
    assert out.stderr != ""
    out = _beamctl("--help")
    assert out.returncode == 0
    assert "status" in out.stdout
