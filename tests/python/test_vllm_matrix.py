# SPDX-License-Identifier: Apache-2.0
"""Tests for scripts/vllm_matrix.py, run as a subprocess the way CI runs it.

The matrix never touches the network here: ``--cached-only`` over the
vLLM snapshot in shared/ (always, when shared/ is there) and over whatever
releases the local download cache holds (skipped when it is empty, as on
CI's machine). The executor-path reader is also checked on small trees
shaped like each era of vLLM's code.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from beamkit import REPO
from beamkit.vllm import GRAPH_API, PYTHON, snapshot_path

MATRIX = os.path.join(REPO, "scripts", "vllm_matrix.py")

sys.path.insert(0, os.path.join(REPO, "scripts"))
import vllm_matrix  # noqa: E402

sys.path.pop(0)


def run_matrix(cache, *extra):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["BEAM_VLLM_CACHE"] = str(cache)
    command = [PYTHON, MATRIX, "--cached-only", "--json", *extra]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def minor(version):
    return tuple(int(p) for p in version.split(".")[:2])


# -- picking releases ---------------------------------------------------------


def test_newest_patch_of_each_minor():
    listed = [
        "0.6.6.post1",
        "0.7.0",
        "0.7.3",
        "0.7.2",
        "0.8.5",
        "0.8.5.post1",
        "0.9.0",
        "0.9.0.1",
        "0.9.2",
        "0.10.1.1",
        "0.10.1",
        "0.11.0rc1",
        "0.11.0",
        "0.12.0.dev3",
    ]
    assert vllm_matrix.newest_per_minor(listed) == [
        "0.7.3",
        "0.8.5.post1",
        "0.9.2",
        "0.10.1.1",
        "0.11.0",
    ]
    assert sorted(["0.10.0", "0.9.2", "0.9.0.1", "0.8.5.post1", "0.8.5"], key=vllm_matrix.version_key) == [
        "0.8.5",
        "0.8.5.post1",
        "0.9.0.1",
        "0.9.2",
        "0.10.0",
    ]


# -- reading the executor path from a release's code ---------------------------


def tree(tmp_path, files):
    for relpath, source in files.items():
        path = tmp_path / "vllm" / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return str(tmp_path)


GET_CLASS = """
    class Executor:
        @staticmethod
        def get_class(vllm_config):
            distributed_executor_backend = vllm_config.backend
            if isinstance(distributed_executor_backend, type):
                executor_class = distributed_executor_backend
            elif distributed_executor_backend == "ray":
    {branch}
            elif distributed_executor_backend == "mp":
                executor_class = None
            return executor_class
"""


def get_class(branch):
    return GET_CLASS.replace("{branch}", textwrap.indent(textwrap.dedent(branch), " " * 16))


def envs(**defaults):
    lines = ["import os", "environment_variables = {"]
    for name, value in defaults.items():
        lines.append(f'    "{name}": lambda: bool(int(os.getenv("{name}", "{value}"))),')
    return "\n".join(lines + ["}"]) + "\n"


def test_executor_path_v0(tmp_path):
    root = tree(
        tmp_path,
        {
            "envs.py": envs(VLLM_USE_V1="0", VLLM_USE_RAY_COMPILED_DAG="0", VLLM_USE_RAY_SPMD_WORKER="0"),
            "engine/llm_engine.py": get_class("""
            from vllm.executor.ray_distributed_executor import (
                RayDistributedExecutor)
            executor_class = RayDistributedExecutor
        """),
            "v1/executor/abstract.py": get_class("executor_class = None"),
        },
    )
    path = vllm_matrix.executor_path(root)
    assert path["kind"] == "v0-actors"
    assert 'VLLM_USE_V1 defaults to "0"' in path["evidence"]


def test_executor_path_v1_compiled_graph(tmp_path):
    root = tree(
        tmp_path,
        {
            "envs.py": envs(VLLM_USE_V1="1"),
            "v1/executor/abstract.py": get_class("""
            from vllm.v1.executor.ray_distributed_executor import (  # noqa
                RayDistributedExecutor)
            executor_class = RayDistributedExecutor
        """),
        },
    )
    path = vllm_matrix.executor_path(root)
    assert path["kind"] == "cgraph"
    assert "ray_distributed_executor.py" in path["evidence"]


@pytest.mark.parametrize("default,kind", [("0", "cgraph"), ("1", "v2")])
def test_executor_path_gated_by_v2_flag(tmp_path, default, kind):
    root = tree(
        tmp_path,
        {
            "envs.py": envs(VLLM_USE_RAY_V2_EXECUTOR_BACKEND=default),
            "v1/executor/abstract.py": get_class("""
            if envs.VLLM_USE_RAY_V2_EXECUTOR_BACKEND:
                from vllm.v1.executor.ray_executor_v2 import RayExecutorV2
                executor_class = RayExecutorV2
            else:
                from vllm.v1.executor.ray_executor import RayDistributedExecutor
                executor_class = RayDistributedExecutor
        """),
        },
    )
    path = vllm_matrix.executor_path(root)
    assert path["kind"] == kind
    assert f'(default "{default}")' in path["evidence"]


def test_executor_path_v2_only(tmp_path):
    root = tree(
        tmp_path,
        {
            "envs.py": envs(),
            "v1/executor/abstract.py": get_class("""
            from vllm.v1.executor.ray_executor_v2 import RayExecutorV2
            executor_class = RayExecutorV2
        """),
        },
    )
    assert vllm_matrix.executor_path(root)["kind"] == "v2"


def test_executor_path_unrecognised(tmp_path):
    root = tree(tmp_path, {"envs.py": envs(), "v1/executor/abstract.py": "pass\n"})
    assert vllm_matrix.executor_path(root)["kind"] == "unknown"


# -- the matrix over the snapshot (always) and the cache (when filled) -------


def test_matrix_over_snapshot(tmp_path):
    tarball = snapshot_path()
    if not os.path.exists(tarball):
        pytest.skip(f"vLLM snapshot not found at {tarball} (set BEAM_SHARED to shared/)")
    out = tmp_path / "COMPAT.md"
    result = run_matrix(tmp_path / "empty-cache", "--extra-tree", f"main@239b5ff30={tarball}", "--out", str(out))
    (row,) = result["rows"]
    assert row["version"] == "main@239b5ff30"
    assert row["executor"]["kind"] == "v2"
    assert row["executor"]["executor"] == "RayExecutorV2"
    assert row["runs"] is True, row["why"]
    # What is missing is the compiled-graph API only, on the opt-in path.
    assert all(vllm_matrix.is_graph_symbol(n.split('"')[1] if '"' in n else n) for n in row["missing"])
    assert (row["counts"]["missing"] == 0) == GRAPH_API
    assert "ray.serve" in row["out_of_scope"]
    text = out.read_text()
    assert "| main@239b5ff30 |" in text
    assert "| RayExecutorV2 | yes:" in text
    assert result["headline"] == "No vLLM release scanned."


def cached_releases():
    return vllm_matrix.cached_versions(vllm_matrix.default_cache())


def test_matrix_over_cached_releases():
    versions = cached_releases()
    if not versions:
        pytest.skip(f"no vLLM release in {vllm_matrix.default_cache()} " "(run scripts/vllm_matrix.py to fill it)")
    result = run_matrix(vllm_matrix.default_cache())
    rows = {row["version"]: row for row in result["rows"]}
    assert sorted(rows, key=vllm_matrix.version_key) == versions
    for version, row in rows.items():
        kind = row["executor"]["kind"]
        if minor(version) < (0, 8):
            assert kind == "v0-actors", version
        elif minor(version) < (0, 21):
            assert kind == "cgraph", version
        else:
            assert kind == "v2", version
        if kind == "cgraph":
            # Runs exactly when beam has the compiled-graph API.
            assert row["runs"] is GRAPH_API, (version, row["why"])
            if not GRAPH_API:
                assert row["why"].startswith("needs the compiled-graph API"), row["why"]
        else:
            assert row["runs"] is True, (version, row["why"])
        if minor(version) >= (0, 29):
            # The RDT weight-transfer backend: out of scope, never missing.
            for name in (
                "ray.experimental.register_nixl_memory",
                ".options(enable_tensor_transport=...)",
                "ray.method(tensor_transport=...)",
            ):
                assert name in row["out_of_scope"], (version, name)
    running = sum(row["runs"] for row in rows.values())
    assert result["headline"].startswith(f"beam runs {running} of {len(rows)} vLLM releases")


def test_compat_md_covers_every_minor():
    """docs/COMPAT.md has a row for every minor from 0.7 to its newest."""
    with open(os.path.join(REPO, "docs", "COMPAT.md"), encoding="utf-8") as handle:
        text = handle.read()
    versions = re.findall(r"^\| (\d+\.\d+[0-9.a-z]*) \|", text, re.M)
    minors = sorted({minor(v) for v in versions})
    assert minors[0] == (0, 7)
    assert minors == [(0, m) for m in range(7, minors[-1][1] + 1)]
    assert minors[-1] >= (0, 34)
    assert re.search(r"^\*\*beam runs \d+ of \d+ vLLM releases", text, re.M)
