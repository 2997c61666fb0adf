# SPDX-License-Identifier: Apache-2.0
"""beamd under systemd: readiness through a real NOTIFY_SOCKET (as systemd
reads it for Type=notify), the unit that `cmake --install` puts in place,
and `systemd-analyze verify` on it where systemd-analyze is installed."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest

from beamkit.daemon import Beamd
from beamkit.procs import wait_file


def _build_dir():
    return os.path.dirname(os.environ["BEAM_BEAMD"])


def _start_beamd(sock_dir, notify):
    env = dict(os.environ, NOTIFY_SOCKET=notify)
    return subprocess.Popen(
        [
            os.environ["BEAM_BEAMD"],
            "--socket",
            os.path.join(sock_dir, "beamd.sock"),
            "--num-gpus",
            "0",
            "--num-cpus",
            "1",
            "--node-ip",
            "127.0.0.1",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _fields(datagram):
    return dict(line.split("=", 1) for line in datagram.decode().splitlines() if "=" in line)


@pytest.mark.parametrize("abstract", [False, True])
def test_ready_and_stopping_through_notify_socket(tmp_path, abstract):
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:  # systemd may hand out an abstract address, written with a leading '@'
        name = f"beam-test-notify-{os.getpid()}-{id(tmp_path)}"
        rx.bind("\0" + name)
        notify = "@" + name
    else:
        notify = str(tmp_path / "notify.sock")
        rx.bind(notify)
    rx.settimeout(10)
    proc = _start_beamd(str(tmp_path), notify)
    try:
        ready = _fields(rx.recv(4096))
        assert ready.get("READY") == "1"
        assert ready.get("MAINPID") == str(proc.pid)
        assert str(tmp_path / "beamd.sock") in ready.get("STATUS", "")
        # ready means serving: a client gets an answer at once
        out = subprocess.run(
            [os.environ["BEAM_BEAMCTL"], "--socket", str(tmp_path / "beamd.sock"), "status", "--json"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert out.returncode == 0, out.stderr
        proc.send_signal(signal.SIGTERM)
        assert _fields(rx.recv(4096)).get("STOPPING") == "1"
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        rx.close()


def test_no_notify_socket_listening_is_harmless(tmp_path):
    """NOTIFY_SOCKET naming nothing (systemd gone, a copied environment):
    beamd still starts and serves."""
    proc = _start_beamd(str(tmp_path), str(tmp_path / "nobody-listens.sock"))
    try:
        sock = str(tmp_path / "beamd.sock")
        assert wait_file(sock)
        out = subprocess.run(
            [os.environ["BEAM_BEAMCTL"], "--socket", sock, "status"], capture_output=True, text=True, timeout=10
        )
        assert out.returncode == 0, out.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_workers_do_not_inherit_notify_socket(tmp_path, monkeypatch):
    import ray

    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(str(tmp_path / "notify.sock"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    d = Beamd(num_gpus=0, num_cpus=2)
    monkeypatch.delenv("NOTIFY_SOCKET")  # whatever a worker has, it got from beamd
    monkeypatch.setenv("BEAM_SOCKET", d.socket)
    try:
        ray.init()

        @ray.remote(num_cpus=0)
        class Env:
            def get(self, key):
                return os.environ.get(key)

        env = Env.remote()  # (a method holds its handle weakly, as Ray's)
        assert ray.get(env.get.remote("NOTIFY_SOCKET"), timeout=10) is None
    finally:
        ray.shutdown()
        assert d.stop() == 0
        shutil.rmtree(d.dir, ignore_errors=True)
        rx.close()


# --- the installed unit ---


def _unit(path):
    """The unit's [Service] settings: key -> list of values, in order."""
    out, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, _, value = line.partition("=")
            out.setdefault((section, key), []).append(value)
    return out


@pytest.fixture(scope="module")
def installed():
    """`cmake --install` of this build into a fresh prefix."""
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("cmake is not installed")
    prefix = tempfile.mkdtemp(prefix="beam-install-")
    try:
        out = subprocess.run(
            [cmake, "--install", _build_dir(), "--prefix", prefix], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stdout + out.stderr
        units = [os.path.join(root, f) for root, _, files in os.walk(prefix) for f in files if f == "beamd.service"]
        yield prefix, units
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def test_install_puts_binaries_and_unit_in_place(installed):
    prefix, units = installed
    for exe in ("beamd", "beamctl"):
        path = os.path.join(prefix, "bin", exe)
        assert os.access(path, os.X_OK), path
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
        assert out.returncode == 0 and "usage" in out.stdout
    # one unit, in the prefix's systemd unit folder (pkg-config's
    # systemdsystemunitdir under the prefix; lib/systemd/system without it)
    assert len(units) == 1, units
    rel = os.path.relpath(units[0], prefix)
    assert rel.endswith(os.path.join("systemd", "system", "beamd.service")), rel


def test_unit_contents(installed):
    prefix, (unit,) = installed
    u = _unit(unit)

    def one(key):
        (value,) = u[("Service", key)]
        return value

    assert one("Type") == "notify"
    exec_start = one("ExecStart").split()
    assert exec_start[:3] == [os.path.join(prefix, "bin", "beamd"), "--socket", "/run/beam/beamd.sock"]
    assert one("RuntimeDirectory") == "beam"
    assert one("RuntimeDirectoryMode") == "0700"
    assert one("UMask") == "0077"
    assert one("NoNewPrivileges") == "yes"
    assert one("ProtectSystem") == "strict"
    assert one("LockPersonality") == "yes"
    assert one("Restart") == "on-failure"
    assert one("KillMode") == "control-group"
    assert set(one("RestrictAddressFamilies").split()) == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    # workers write /tmp; drivers and workers must share /tmp and /dev/shm
    rw = " ".join(u.get(("Service", "ReadWritePaths"), [])).split()
    assert "/tmp" in rw
    assert u.get(("Service", "PrivateTmp"), ["no"]) == ["no"]
    # GPUs stay reachable: nothing that installs a device list
    for key in ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock"):
        assert ("Service", key) not in u, key
    assert u.get(("Service", "ProtectHome"), ["no"])[0] in ("no", "read-only")
    assert u[("Install", "WantedBy")] == ["multi-user.target"]


def test_staged_install_keeps_destdir_out_of_the_unit(tmp_path):
    """A package build: DESTDIR=stage, prefix /usr. Files land under the
    stage; the unit names /usr/bin/beamd."""
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("cmake is not installed")
    stage = tmp_path / "stage"
    out = subprocess.run(
        [cmake, "--install", _build_dir(), "--prefix", "/usr"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, DESTDIR=str(stage)),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert os.access(stage / "usr" / "bin" / "beamd", os.X_OK)
    (unit,) = [os.path.join(r, f) for r, _, fs in os.walk(stage) for f in fs if f == "beamd.service"]
    assert os.path.relpath(unit, stage).startswith("usr" + os.sep)
    (exec_start,) = _unit(unit)[("Service", "ExecStart")]
    assert exec_start.split()[0] == "/usr/bin/beamd"


def test_systemd_analyze_verify(installed):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    _prefix, (unit,) = installed
    out = subprocess.run([analyze, "verify", unit], capture_output=True, text=True, timeout=60)
    complaints = [line for line in (out.stdout + out.stderr).splitlines() if "beamd.service" in line]
    assert out.returncode == 0, out.stdout + out.stderr
    assert complaints == []
