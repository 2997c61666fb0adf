# SPDX-License-Identifier: Apache-2.0
"""The suite is hermetic (conftest.py, beamkit.suite): everything a driver
would look at on its own to find a cluster, a session or a token lies in the
suite's folder, fresh for each test, in this process and in what it starts;
RAY_ADDRESS and BEAM_SOCKET are unset. A user's `ray start` cluster, its
/tmp/ray session files and ~/.ray token are out of sight."""

import json
import os
import subprocess
import sys

import conftest

# what a driver would find on its own, as beam and Ray compute it
_PROBE = r"""
import json, os, tempfile
out = {"tmp": tempfile.gettempdir(), "home": os.path.expanduser("~"),
       "env": {k: os.environ.get(k) for k in ("RAY_ADDRESS", "BEAM_SOCKET", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}}
try:
    import _beam
    from ray._private import node
    out["socket"] = _beam.default_socket_path()
    out["ray_tmp"] = node.ray_temp_dir()
    out["private"] = os.path.join(tempfile.gettempdir(), "beam-%d" % os.getuid())
except ImportError:  # real Ray's interpreter
    from ray._private.utils import get_ray_temp_dir
    out["ray_tmp"] = get_ray_temp_dir()
print(json.dumps(out))
"""


def _probe():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _inside(path, folder):
    return os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)


def test_a_subprocess_finds_only_the_suites_own_folders():
    root = conftest.ROOT
    assert root and os.path.isdir(root)
    got = _probe()
    assert all(v is None for v in got["env"].values()), got["env"]
    for key in ("tmp", "home", "ray_tmp", "socket", "private"):
        if key in got:
            assert got[key] == root if key == "tmp" else _inside(got[key], root), (key, got[key], root)


def test_each_test_gets_its_own_ray_temp_folder_and_home():
    first = _probe()
    # the previous test's folders are not this one's
    assert first["ray_tmp"] == os.path.join(os.environ["RAY_TMPDIR"], "ray")
    assert first["home"] == os.environ["HOME"]
    assert os.path.basename(os.environ["RAY_TMPDIR"]).startswith("t")


def test_addresses_set_by_the_caller_are_unset_in_the_next_test(monkeypatch):
    # a test that sets them for itself (monkeypatch) ...
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert _probe()["env"]["RAY_ADDRESS"] == "10.0.0.1:6379"


def test_and_the_next_test_does_not_see_them():
    assert "RAY_ADDRESS" not in os.environ and "BEAM_SOCKET" not in os.environ
