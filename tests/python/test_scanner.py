# SPDX-License-Identifier: Apache-2.0
"""Tests for scripts/scan_vllm_ray.py, run as a subprocess the way CI runs it.

Synthetic trees are written to tmp_path and checked against a small fake
``ray`` (passed with --beam-python) so every count is exact whatever the core
runtime currently provides; one tree is checked against beam's real ``ray``
using only names this test's owner's modules provide; and the real vLLM
snapshot from shared/ is unpacked into tmp_path and scanned.
"""

import json
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCANNER = os.path.join(REPO, "scripts", "scan_vllm_ray.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
SNAPSHOT = "vllm-239b5ff30.tar.gz"


def write_tree(root, files):
    """Write ``{relative path: source}`` under ``root``; return root."""
    for relpath, source in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def run_scanner(tree, beam_python=None, as_json=True):
    """Run the scanner on ``tree``; return (exit status, parsed JSON or text)."""
    command = [PYTHON, SCANNER, str(tree)]
    if as_json:
        command.append("--json")
    if beam_python is not None:
        command += ["--beam-python", str(beam_python)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, (json.loads(done.stdout) if as_json else done.stdout)


def by_status(report):
    """{status: {display name: symbol dict}}."""
    out = {"in_scope": {}, "out_of_scope": {}, "missing": {}}
    for symbol in report["symbols"]:
        name = symbol["symbol"]
        if symbol["kind"] == "find_spec":
            name = f"find_spec:{name}"
        out[symbol["status"]][name] = symbol
    return out


# A stand-in for beam's ray with exactly the names the synthetic trees need.
FAKE_RAY = {
    "ray/__init__.py": """
        from ray import util
        def get(refs, timeout=None):
            return refs
    """,
    "ray/util/__init__.py": """
        from ray.util.placement_group import placement_group
        def get_current_placement_group():
            return None
    """,
    "ray/util/placement_group.py": """
        class PlacementGroup:
            pass
        def placement_group(bundles, strategy="PACK"):
            return PlacementGroup()
    """,
    "ray/exceptions.py": """
        class GetTimeoutError(TimeoutError):
            pass
    """,
    "ray/experimental/__init__.py": "",
}


@pytest.fixture
def fake_ray(tmp_path):
    return write_tree(tmp_path / "beam_python", FAKE_RAY)


MAIN_TREE = {
    "pkg/__init__.py": "",
    "pkg/executor.py": """
        import importlib.util
        from typing import TYPE_CHECKING

        import ray as r
        from ray.util import placement_group as pg

        if TYPE_CHECKING:
            from ray.util.placement_group import PlacementGroup


        def start(x: "PlacementGroup") -> None:
            import ray
            from ray import serve

            ray.get([])
            pg([{"CPU": 1.0}])
            r.util.get_current_placement_group()
            ray.util.does_not_exist()
            importlib.util.find_spec("ray.experimental")
            importlib.util.find_spec("ray.experimental.compiled_dag_ref")
            try:
                pass
            except r.exceptions.GetTimeoutError:
                pass
    """,
}


def test_counts_on_synthetic_tree(tmp_path, fake_ray):
    tree = write_tree(tmp_path / "src", MAIN_TREE)
    status, report = run_scanner(tree, fake_ray)
    groups = by_status(report)
    assert report["counts"] == {"in_scope": 7, "out_of_scope": 2, "missing": 1}
    assert status == 1
    assert set(groups["in_scope"]) == {
        "ray",
        "ray.get",
        "ray.util.placement_group",
        "ray.util.placement_group.PlacementGroup",
        "ray.util.get_current_placement_group",
        "ray.exceptions.GetTimeoutError",
        "find_spec:ray.experimental",
    }
    assert set(groups["out_of_scope"]) == {
        "ray.serve",
        "find_spec:ray.experimental.compiled_dag_ref",
    }
    assert set(groups["missing"]) == {"ray.util.does_not_exist"}
    missing = groups["missing"]["ray.util.does_not_exist"]
    assert missing["locations"] == [
        {"path": os.path.join("pkg", "executor.py"), "line": 19, "type_only": False}
    ]
    assert report["files_scanned"] == 2
    assert report["files_touching_ray"] == 1
    assert report["must_be_absent_violations"] == []


def test_aliases_and_nesting(tmp_path, fake_ray):
    tree = write_tree(tmp_path / "src", MAIN_TREE)
    _, report = run_scanner(tree, fake_ray)
    groups = by_status(report)
    # `import ray as r` at module level and `import ray` inside start().
    assert [u["line"] for u in groups["in_scope"]["ray"]["locations"]][:2] == [5, 13]
    pg = groups["in_scope"]["ray.util.placement_group"]
    assert pg["called"] and not pg["type_only"]
    assert [u["line"] for u in pg["locations"]] == [6, 17]
    assert groups["in_scope"]["ray.util.get_current_placement_group"]["called"]


def test_type_checking_imports_are_type_only(tmp_path, fake_ray):
    tree = write_tree(tmp_path / "src", MAIN_TREE)
    _, report = run_scanner(tree, fake_ray)
    groups = by_status(report)
    pg_class = groups["in_scope"]["ray.util.placement_group.PlacementGroup"]
    assert pg_class["type_only"] is True
    # The import under TYPE_CHECKING and the string annotation that uses it.
    assert [(u["line"], u["type_only"]) for u in pg_class["locations"]] == [
        (9, True),
        (12, True),
    ]
    assert groups["in_scope"]["ray.get"]["type_only"] is False


def test_nothing_missing_exits_zero(tmp_path, fake_ray):
    tree = write_tree(
        tmp_path / "src",
        {
            "a.py": """
                import ray
                def f():
                    return ray.get([])
            """
        },
    )
    status, report = run_scanner(tree, fake_ray)
    assert status == 0
    assert report["counts"] == {"in_scope": 2, "out_of_scope": 0, "missing": 0}


def test_text_output_lists_missing_with_location(tmp_path, fake_ray):
    tree = write_tree(tmp_path / "src", MAIN_TREE)
    status, text = run_scanner(tree, fake_ray, as_json=False)
    assert status == 1
    assert "in scope: 7  out of scope: 2  missing: 1" in text
    assert f"ray.util.does_not_exist  {os.path.join('pkg', 'executor.py')}:19" in text
    assert "ray.serve" in text and "Ray Serve" in text


def test_called_module_is_missing(tmp_path):
    beam = write_tree(
        tmp_path / "beam_python",
        {"ray/__init__.py": "", "ray/util/__init__.py": "", "ray/util/placement_group.py": ""},
    )
    tree = write_tree(
        tmp_path / "src",
        {
            "a.py": """
                import ray
                import ray.util.placement_group
                ray.util.placement_group([{"GPU": 1}])
            """
        },
    )
    status, report = run_scanner(tree, beam)
    groups = by_status(report)
    assert status == 1
    assert "not callable" in groups["missing"]["ray.util.placement_group"]["reason"]


def test_reexported_ray_is_followed(tmp_path, fake_ray):
    tree = write_tree(
        tmp_path / "src",
        {
            "pkg/__init__.py": "",
            "pkg/helpers.py": """
                try:
                    import ray
                except ImportError:
                    ray = None
            """,
            "pkg/user.py": """
                def f():
                    from pkg.helpers import ray
                    ray.util.not_here()
            """,
            "other/__init__.py": "",
            "other/ray/__init__.py": "",
            "other/user.py": """
                from other import ray
                ray.whatever()
            """,
        },
    )
    _, report = run_scanner(tree, fake_ray)
    groups = by_status(report)
    assert set(groups["missing"]) == {"ray.util.not_here"}
    assert groups["missing"]["ray.util.not_here"]["locations"][0]["path"] == os.path.join(
        "pkg", "user.py"
    )


def test_deferred_and_local_annotations_are_type_only(tmp_path, fake_ray):
    tree = write_tree(
        tmp_path / "src",
        {
            "a.py": """
                from __future__ import annotations
                import ray
                def f(x: ray.NotThere) -> None:
                    pass
            """,
            "b.py": """
                import ray
                class C:
                    def __init__(self):
                        self.handles: list[ray.AlsoNotThere] = []
                    field: ray.get = None
                def g(x: list["ray.InAString"]):
                    pass
            """,
        },
    )
    _, report = run_scanner(tree, fake_ray)
    groups = by_status(report)
    assert groups["missing"]["ray.NotThere"]["type_only"] is True
    assert groups["missing"]["ray.AlsoNotThere"]["type_only"] is True
    assert groups["missing"]["ray.InAString"]["type_only"] is True
    assert groups["missing"]["ray.InAString"]["locations"][0]["line"] == 7
    # A class-level annotation is evaluated, so it is a runtime use.
    assert groups["in_scope"]["ray.get"]["type_only"] is False


def test_must_be_absent_violation(tmp_path, fake_ray):
    (fake_ray / "ray" / "experimental" / "compiled_dag_ref.py").write_text("")
    tree = write_tree(tmp_path / "src", {"a.py": "import ray\n"})
    status, report = run_scanner(tree, fake_ray)
    assert report["counts"]["missing"] == 0
    assert report["must_be_absent_violations"] == ["ray.experimental.compiled_dag_ref"]
    assert status == 1


def test_scanned_code_is_never_imported(tmp_path, fake_ray):
    marker = tmp_path / "executed"
    tree = write_tree(
        tmp_path / "src",
        {
            "ray/__init__.py": f"open({str(marker)!r}, 'w').close()\n",
            "a.py": "import ray\nray.get([])\n",
        },
    )
    status, report = run_scanner(tree, fake_ray)
    assert status == 0
    assert not marker.exists()


def test_against_beams_own_modules(tmp_path):
    """Names provided by exceptions, runtime_env, metrics, dag, cloudpickle."""
    tree = write_tree(
        tmp_path / "src",
        {
            "a.py": """
                import importlib.util
                from ray.exceptions import RayTaskError, GetTimeoutError
                from ray.runtime_env import RuntimeEnv
                from ray.util.metrics import Counter
                from ray.dag import InputNode, MultiOutputNode
                from ray import cloudpickle

                def f():
                    cloudpickle.register_pickle_by_value(importlib)
                    RuntimeEnv(env_vars={})
                    importlib.util.find_spec("ray.experimental.compiled_dag_ref")
                    importlib.util.find_spec("ray.experimental.channel")
            """
        },
    )
    status, report = run_scanner(tree)
    groups = by_status(report)
    assert set(groups["in_scope"]) == {
        "ray.exceptions.RayTaskError",
        "ray.exceptions.GetTimeoutError",
        "ray.runtime_env.RuntimeEnv",
        "ray.util.metrics.Counter",
        "ray.dag.InputNode",
        "ray.dag.MultiOutputNode",
        "ray.cloudpickle",
        "ray.cloudpickle.register_pickle_by_value",
    }
    assert set(groups["out_of_scope"]) == {
        "find_spec:ray.experimental.compiled_dag_ref",
        "find_spec:ray.experimental.channel",
    }
    assert report["counts"]["missing"] == 0
    assert report["must_be_absent_violations"] == []
    assert status == 0


# -- the real vLLM snapshot -------------------------------------------------


def snapshot_path():
    shared = os.environ.get("BEAM_SHARED") or os.path.join(os.path.dirname(REPO), "shared")
    return os.path.join(shared, "vllm", SNAPSHOT)


@pytest.fixture(scope="module")
def vllm_report(tmp_path_factory):
    tarball = snapshot_path()
    if not os.path.exists(tarball):
        pytest.skip(f"vLLM snapshot not found at {tarball} (set BEAM_SHARED to shared/)")
    root = tmp_path_factory.mktemp("vllm")
    with tarfile.open(tarball) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(root, filter="data")
        else:  # Python before 3.11.4 has no extraction filters
            archive.extractall(root)
    return run_scanner(root)


def test_vllm_snapshot_shape(vllm_report):
    """What holds today, whatever the core provides."""
    _, report = vllm_report
    groups = by_status(report)
    assert report["parse_errors"] == []
    assert report["files_touching_ray"] >= 10
    assert report["must_be_absent_violations"] == []
    assert "find_spec:ray.experimental.compiled_dag_ref" in groups["out_of_scope"]
    assert "ray.serve" in groups["out_of_scope"]
    for name in (
        "ray.exceptions.GetTimeoutError",
        "ray.exceptions.RayActorError",
        "ray.runtime_env.RuntimeEnv",
        "ray.dag.InputNode",
        "ray.cloudpickle.register_pickle_by_value",
    ):
        assert name in groups["in_scope"], name


def test_vllm_snapshot_has_nothing_missing(vllm_report):
    status, report = vllm_report
    missing = sorted(s["symbol"] for s in report["symbols"] if s["status"] == "missing")
    assert missing == []
    assert status == 0
