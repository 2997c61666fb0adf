# SPDX-License-Identifier: Apache-2.0
"""`cmake --install` puts a working ray package in place: with only the
installed site folder on the path, `import ray`, `_beam`, the 2.43.0
distribution metadata and a private daemon from the installed beamd work."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_dir():
    exe = os.environ.get("BEAM_BEAMD")
    if not exe:
        pytest.skip("BEAM_BEAMD is not set (run through scripts/test.sh)")
    return os.path.dirname(exe)


def test_installed_package_imports_and_runs(tmp_path):
    prefix = tmp_path / "prefix"
    out = subprocess.run(
        ["cmake", "--install", build_dir(), "--prefix", str(prefix)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    v = sys.version_info
    site = prefix / "lib" / f"python{v.major}.{v.minor}" / "dist-packages"
    assert (site / "ray" / "__init__.py").is_file()
    assert (site / "ray-2.43.0.dist-info" / "METADATA").is_file()
    assert list(site.glob("_beam*.so"))
    assert not list((site / "ray").rglob("__pycache__"))
    code = (
        "import importlib.metadata, ray, _beam\n"
        "assert ray.__file__.startswith(%r), ray.__file__\n"
        "assert importlib.metadata.version('ray') == '2.43.0'\n"
        "ray.init(num_gpus=1)\n"
        "@ray.remote(num_gpus=1)\n"
        "class A:\n"
        "    def f(self): return ray.get_gpu_ids()\n"
        "a = A.remote()\n"
        "print('GPUS', ray.get(a.f.remote()))\n"
        "ray.shutdown()\n" % str(site)
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BEAM_BEAMD", "BEAM_SOCKET")}
    env["PYTHONPATH"] = str(site)
    env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '')}"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path)
    )
    assert out.returncode == 0, out.stderr
    assert "GPUS [0]" in out.stdout
