# SPDX-License-Identifier: Apache-2.0
"""What the scanner and vLLM-matrix tests share: the interpreter that runs
scripts/, beam's python/ folder, whether it has the compiled-graph API, and
the vLLM source snapshot in shared/."""

import os
import sys

from . import REPO

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
SNAPSHOT = "vllm-239b5ff30.tar.gz"
BEAM_PYTHON = os.path.join(REPO, "python")
GRAPH_API = os.path.exists(os.path.join(BEAM_PYTHON, "ray", "experimental", "compiled_dag_ref.py")) or os.path.isdir(
    os.path.join(BEAM_PYTHON, "ray", "experimental", "compiled_dag_ref")
)


def snapshot_path():
    """The vLLM snapshot tarball (BEAM_SHARED, else shared/ beside the repository)."""
    shared = os.environ.get("BEAM_SHARED") or os.path.join(os.path.dirname(REPO), "shared")
    return os.path.join(shared, "vllm", SNAPSHOT)
