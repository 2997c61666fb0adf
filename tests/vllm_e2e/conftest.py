# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the vLLM end-to-end kit (run by run.sh with the venv's own
Python: beam's or real Ray's, told apart by kit.variant_of). The tiny model
is made once per session; the reference tokens come from vLLM's own `mp`
backend, once per session."""

import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kit  # noqa: E402
import vllm_kit_procs  # noqa: E402

VENV = sys.prefix


def pytest_configure(config):
    if not vllm_kit_procs.available():
        raise pytest.UsageError("the vLLM kit needs a writable pids cgroup (run it as root)")


@pytest.fixture(scope="session")
def variant():
    return kit.variant_of(VENV)


@pytest.fixture(scope="session")
def model():
    d = tempfile.mkdtemp(prefix="vk-model-", dir="/tmp")
    try:
        yield kit.make_model(VENV, os.path.join(d, "tiny-llama"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def run(request):
    r = kit.Run(VENV, request.node.name[:24].replace("[", "-").replace("]", ""))
    try:
        yield r
    finally:
        r.close()


@pytest.fixture(scope="session")
def mp_result(model):
    """vLLM's own multiprocessing backend, TP=2, on the same prompts."""
    r = kit.Run(VENV, "mp")
    try:
        res = r.generate(model, r.env(), "--backend", "mp", "--tp", "2", "--rounds", "1")
        vllm_kit_procs.wait_until(lambda: not r.group.pids(), 30.0)
        assert r.left() == [], r.left()
        return res
    finally:
        r.close()
