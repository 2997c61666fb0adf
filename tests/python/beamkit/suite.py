# SPDX-License-Identifier: Apache-2.0
"""The test suite's own corner of the machine, so that it never sees a
user's running cluster and leaves nothing behind (conftest.py drives it).

    root = enter()           # at start: a fresh folder and environment; it goes at exit
    test_env(mp, root, n)    # per test: its own Ray temp folder, HOME, runtime dir
    leftovers(root)          # at the end: pids of processes still carrying root

What a beam or Ray driver would find on its own, and what the suite gives it
instead:

    Ray's temp folder (beam_node.json, ray_current_cluster, sessions):
        $RAY_TMPDIR/ray, else $TMPDIR/ray, else /tmp/ray -> ROOT/tN/ray
    beam's per-user default socket: $XDG_RUNTIME_DIR/beam/beamd.sock when
        that folder is the user's, else /tmp/beam-UID/beamd.sock
        -> ROOT/tN/run/beam/beamd.sock
    a private daemon's folder ($TMPDIR/beam-UID/...), tempfile's folders,
        pytest's tmp_path -> under ROOT (TMPDIR)
    ~/.ray/auth_token (the cluster token `ray start` reads or writes)
        -> ROOT/tN/home/.ray/auth_token (HOME); caches and tool settings
        (pip.conf, pip/HF/torch caches, user site) stay the user's through
        XDG_CACHE_HOME, XDG_CONFIG_HOME, PYTHONUSERBASE
    RAY_ADDRESS, BEAM_SOCKET, RAY_AUTH_TOKEN*, RAY_AUTH_MODE -> unset

Every process the suite starts inherits this (TMPDIR=ROOT at least), which
is how leftovers() finds one that outlived the suite. Real Ray (the
BEAM_REAL_RAY runs) honours RAY_TMPDIR too, and with no address looks only
at its temp folder's ray_current_cluster.
"""

import atexit
import os
import shutil
import tempfile

UNSET = (
    "RAY_ADDRESS",
    "BEAM_SOCKET",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "RAY_AUTH_MODE",
    "RAY_NAMESPACE",
    "RAY_JOB_CONFIG_JSON_ENV_VAR",
)

_saved = {}


def enter():
    """Makes the suite's folder (short, under /tmp: unix socket paths live
    below it) and points this process's environment at it."""
    root = tempfile.mkdtemp(prefix="bt-", dir="/tmp")
    os.chmod(root, 0o711)  # another uid a test plays may pass through to a folder it opened to it
    home = os.path.expanduser("~")
    keep = {  # the user's tool settings and caches, wherever HOME goes
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"),
        "XDG_CONFIG_HOME": os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
        "PYTHONUSERBASE": os.environ.get("PYTHONUSERBASE") or os.path.join(home, ".local"),
    }
    change = dict(keep, TMPDIR=root, BEAMTEST_ROOT=root)
    for k in list(change) + list(UNSET) + ["HOME", "RAY_TMPDIR", "XDG_RUNTIME_DIR"]:
        _saved.setdefault(k, os.environ.get(k))
    for k in UNSET:
        os.environ.pop(k, None)
    os.environ.update(change)
    _point(root, os.environ.__setitem__, "s")
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    # at exit, after pytest's own clean-up of its folders in it (atexit runs last-registered first)
    atexit.register(_leave, root)
    return root


def _point(root, setenv, name):
    """HOME, RAY_TMPDIR and XDG_RUNTIME_DIR in folders of their own under root."""
    base = os.path.join(root, name)
    for sub in ("home", "run"):
        os.makedirs(os.path.join(base, sub), mode=0o700, exist_ok=True)
    setenv("HOME", os.path.join(base, "home"))
    setenv("RAY_TMPDIR", base)
    setenv("XDG_RUNTIME_DIR", os.path.join(base, "run"))
    return base


def test_env(monkeypatch, root, n):
    """One test's own Ray temp folder, HOME and runtime folder (ROOT/tN),
    and none of the variables that would point it at a cluster; undone by
    monkeypatch after the test. Returns the folder."""
    for k in UNSET:
        monkeypatch.delenv(k, raising=False)
    return _point(root, monkeypatch.setenv, f"t{n}")


def leftovers(root):
    """Live processes other than this one whose environment or arguments
    name root: started by the suite (or by what it started)."""
    from .procs import processes

    return sorted(set(processes(root)) | set(processes(root, "cmdline")))


def describe(pids):
    from .procs import cmdline

    return ", ".join(f"{p} ({b' '.join(cmdline(p)).decode(errors='replace')[:120]})" for p in pids)


def _leave(root):
    """Removes root and puts the environment back as it was."""
    shutil.rmtree(root, ignore_errors=True)
    for k, v in _saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _saved.clear()
    tempfile.tempdir = None
