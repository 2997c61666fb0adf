# SPDX-License-Identifier: Apache-2.0
"""beam as a pip package: `pip install .` into a fresh virtual environment
gives the `ray` distribution (2.43.0, as ray.__version__), the `ray`,
`beamd` and `beamctl` commands and daemons inside the package, statically
linked; the README demo runs from that venv on a `ray start` node; the
wheel replaces a Ray already installed, and `pip uninstall ray` leaves
nothing of beam behind."""

import base64
import hashlib
import os
import socket
import subprocess
import zipfile

import pytest

from beamkit import REPO
from beamkit import venv as venv_util
from beamkit.procs import alive
from beamkit.venv import Node

pytestmark = venv_util.skip_in_sanitizer_pass


@pytest.fixture(scope="module")
def venv():
    return venv_util.installed_venv()


def site_packages(venv):
    out = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_pip_install_gives_ray_commands_and_daemons(venv):
    node = Node(venv)
    for name in ("ray", "beamd", "beamctl"):
        assert os.access(node.bin(name), os.X_OK), name
    out = node.ray("--version")
    assert out.returncode == 0 and out.stdout.strip() == "ray, version 2.43.0", out
    code = (
        "import importlib.metadata as m, os, ray, _beam\n"
        "from ray._private import node\n"
        "print(m.version('ray'), ray.__version__)\n"
        "print(ray.__file__)\n"
        "print(node.program_path('beamd'))\n"
    )
    out = node.run(node.bin("python"), "-c", code)
    assert out.returncode == 0, out.stderr
    versions, init, beamd = out.stdout.split("\n")[:3]
    assert versions == "2.43.0 2.43.0"
    site = site_packages(venv)
    assert init == os.path.join(site, "ray", "__init__.py")
    assert beamd == os.path.join(site, "ray", "_bin", "beamd")
    # the console scripts run the programs inside the package
    out = node.run(node.bin("beamd"), "--help")
    assert out.returncode == 0 and "usage: beamd" in out.stdout
    out = node.run(node.bin("beamctl"), "--help")
    assert out.returncode == 0 and "usage: beamctl" in out.stdout
    # libuv, msgpack-c and libsodium are inside the binaries
    for f in [beamd, os.path.join(site, "ray", "_bin", "beamctl")] + [
        os.path.join(site, x) for x in os.listdir(site) if x.startswith("_beam")
    ]:
        ldd = subprocess.run(["ldd", f], capture_output=True, text=True).stdout
        assert not any(lib in ldd for lib in ("libuv", "libmsgpack", "libsodium", "libsystemd")), (f, ldd)


def test_readme_demo_from_the_venv(venv):
    """README's single-node path, as a pip user runs it: `ray start --head`,
    the demo as a driver with plain ray.init(), `ray stop`."""
    node = Node(venv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = node.ray("start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1", "--num-gpus", "4")
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Ray runtime started." in out.stdout
        demo = node.run(node.bin("python"), os.path.join(REPO, "scripts", "demo.py"), timeout=120)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "4 workers up" in demo.stdout
        assert "monitor noticed the death" in demo.stdout
        assert "shut down: every worker stopped" in demo.stdout
    finally:
        stop = node.ray("stop")
    assert stop.returncode == 0 and "Stopped all" in stop.stdout, stop
    pid = int(out.stdout.split("beamd pid ", 1)[1].split()[0])
    assert not alive(pid)


def _stand_in_ray_wheel(path):
    """A wheel of a distribution `ray` 2.43.0 shaped as Ray's own: extra
    modules and a console script beam does not have."""
    files = {
        "ray/__init__.py": b"__version__ = '2.43.0'\nREAL_RAY = True\n",
        "ray/_raylet.so": b"not really an ELF",
        "ray/serve/__init__.py": b"",
        "ray/scripts/scripts.py": b"def main():\n    print('real ray')\n",
        "ray-2.43.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: ray\nVersion: 2.43.0\n",
        "ray-2.43.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: beam-test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        "ray-2.43.0.dist-info/entry_points.txt": b"[console_scripts]\nray = ray.scripts.scripts:main\n"
        b"serve = ray.scripts.scripts:main\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append("ray-2.43.0.dist-info/RECORD,,")
        z.writestr("ray-2.43.0.dist-info/RECORD", "\n".join(record) + "\n")


def test_wheel_replaces_ray_and_uninstalls_cleanly(tmp_path):
    wheel = venv_util.built_wheel()
    assert os.path.basename(wheel).startswith("ray-2.43.0-")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {"ray/__init__.py", "ray/_bin/beamd", "ray/_bin/beamctl", "ray/scripts/scripts.py"} <= names
    assert any(n.startswith("_beam") and n.endswith(".so") for n in names)
    assert not any("__pycache__" in n or n.startswith("ray-2.43.0.dist-info/") and "beam" in n for n in names)

    venv = venv_util.new_venv()
    node = Node(venv)
    pip = [node.bin("python"), "-m", "pip", "--disable-pip-version-check"]
    real = tmp_path / "ray-2.43.0-py3-none-any.whl"
    _stand_in_ray_wheel(str(real))
    out = node.run(*pip, "install", "--no-deps", str(real))
    assert out.returncode == 0, out.stderr
    site = site_packages(venv)
    before = set(os.listdir(site))
    assert os.path.exists(os.path.join(site, "ray", "serve")) and os.access(node.bin("serve"), os.X_OK)
    # the same version: pip needs --force-reinstall to swap a wheel in (`pip install .` does it unasked)
    out = node.run(*pip, "install", "--force-reinstall", wheel, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Successfully uninstalled ray-2.43.0" in out.stdout
    assert not os.path.exists(os.path.join(site, "ray", "serve"))
    assert not os.path.exists(os.path.join(site, "ray", "_raylet.so"))
    assert not os.path.exists(node.bin("serve"))
    out = node.run(node.bin("python"), "-c", "import ray, _beam; print(hasattr(ray, 'REAL_RAY'), ray.__version__)")
    assert out.stdout.strip() == "False 2.43.0", out
    out = node.run(*pip, "uninstall", "-y", "ray")
    assert out.returncode == 0, out.stderr
    after = set(os.listdir(site))
    assert not any(n == "ray" or n.startswith(("_beam", "ray-")) for n in after), sorted(after)
    # what stays is what was there before, and cloudpickle (beam's dependency)
    assert all(n in before or n.startswith("cloudpickle") for n in after), sorted(after - before)
    for name in ("ray", "beamd", "beamctl", "serve"):
        assert not os.path.exists(node.bin(name)), name
