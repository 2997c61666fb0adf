# SPDX-License-Identifier: Apache-2.0
"""beamd --resource NAME=N: the amount is checked at start by the rule
resources= amounts meet in create_actor and pg_create (Ray's range: 0, or
0.0001 up to 1e14, no finer than 0.0001); a bad one stops beamd before it
listens, with a message naming the resource, and a non-zero exit. So are
--num-cpus and --memory (before, `--num-cpus nan` started with the
machine's CPUs and `--num-cpus 0.00001` with none, silently)."""

import os
import shutil
import subprocess
import tempfile

import pytest

from beamkit.daemon import Beamd, beamd_args
from beamkit.procs import beam_processes


def _start(arg, flag="--resource"):
    d = tempfile.mkdtemp(prefix="beamt-")
    sock = os.path.join(d, "beamd.sock")
    try:
        out = subprocess.run(
            beamd_args(sock, cpus=1, gpus=0, extra=(flag, arg)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out, os.path.exists(sock)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize(
    "arg, message",
    [
        ("big=1e15", "--resource big: the amount must be 0, or from 0.0001 up to 1e14 (Ray's range)"),
        ("fine=0.00001", "--resource fine: the amount must be 0, or from 0.0001 up to 1e14 (Ray's range)"),
        ("inf=inf", "--resource inf: the amount must be 0, or from 0.0001 up to 1e14 (Ray's range)"),
        ("neg=-1", "--resource neg: the amount must be a number >= 0"),
        ("nan=nan", "--resource nan: the amount must be a number >= 0"),
        ("word=two", "--resource word: the amount must be a number >= 0"),
        ("empty=", "--resource empty: the amount must be a number >= 0"),
        ("=1", "--resource takes NAME=N with a name of 1..127 bytes"),
        ("noamount", "--resource takes NAME=N with a name of 1..127 bytes"),
        ("n" * 128 + "=1", "--resource takes NAME=N with a name of 1..127 bytes"),
    ],
)
def test_bad_amount_refused_at_start(arg, message):
    out, listened = _start(arg)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
    assert not listened


RANGE = "the amount must be 0, or from 0.0001 up to 1e14 (Ray's range)"


@pytest.mark.parametrize("flag", ["--num-cpus", "--memory"])
@pytest.mark.parametrize(
    "arg, message",
    [
        ("1e15", RANGE),
        ("0.00001", RANGE),
        ("inf", RANGE),
        ("-1", "the amount must be a number >= 0"),
        ("nan", "the amount must be a number >= 0"),
        ("two", "the amount must be a number >= 0"),
        ("", "the amount must be a number >= 0"),
    ],
)
def test_bad_cpus_or_memory_refused_at_start(flag, arg, message):
    out, listened = _start(arg, flag)
    assert out.returncode != 0
    assert f"beamd: {flag}: {message}" in out.stderr, out.stderr
    assert not listened


def test_cpus_and_memory_in_range_are_taken():
    d = Beamd(num_gpus=0, num_cpus=0.0001, extra=["--memory", "1e14"])
    try:
        total = d.status()["resources_total"]
    finally:
        rc = d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    assert rc == 0
    assert total["CPU"] == 0.0001 and total["memory"] == 1e14


def test_amounts_in_range_are_taken(tmp_path):
    d = Beamd(
        num_gpus=0,
        num_cpus=1,
        extra=[
            "--resource",
            "top=1e14",
            "--resource",
            "least=0.0001",
            "--resource",
            "none=0",
            "--resource",
            "n" * 127 + "=2",
        ],
    )
    try:
        total = d.status()["resources_total"]
    finally:
        rc = d.stop()
        left = beam_processes(d.socket)
        shutil.rmtree(d.dir, ignore_errors=True)
    assert rc == 0 and not left
    assert total["top"] == 1e14
    assert total["least"] == 0.0001
    assert total["n" * 127] == 2
