# SPDX-License-Identifier: Apache-2.0
"""Worker output in the driver as Ray prints it (issue 15): a task's lines
under ``(f pid=N)``, an actor's under its ``__repr__`` once constructed,
Ray's "[repeated Nx across cluster]" deduplication, all written through the
driver's sys.stdout/sys.stderr so pytest's capsys sees them.

The ray_compat tests also pass on real Ray 2.43 (`env -u PYTHONPATH -u
BEAM_SOCKET /opt/ray-venv/bin/python -m pytest -q -p no:warnings
tests/python/test_worker_output.py -m ray_compat`).
"""

import os
import re
import time

import pytest

import ray

ON_RAY = getattr(ray, "__commit__", "") != "beam"
beam_only = pytest.mark.skipif(ON_RAY, reason="checks beam itself")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module", autouse=True)
def ray_env():
    """One ray.init() for the module: a beamd with 4 CPUs, or a local real Ray."""
    from beamkit.daemon import one_ray_for_module

    with one_ray_for_module(num_cpus=4) as d:
        yield d


class _Seen:
    """What capsys has caught so far, both streams, colours stripped."""

    def __init__(self, capsys):
        self.capsys = capsys
        self.out = ""
        self.err = ""

    def until(self, pred, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            got = self.capsys.readouterr()
            self.out += _ANSI.sub("", got.out)
            self.err += _ANSI.sub("", got.err)
            if pred(self) or time.monotonic() > deadline:
                return pred(self)
            time.sleep(0.1)


@ray.remote
def shout(word):
    import sys

    print(f"task says {word}")
    print(f"task errs {word}", file=sys.stderr)
    return os.getpid()


@pytest.mark.ray_compat
def test_task_output_reaches_sys_stdout_under_the_function_name(capsys):
    pid = ray.get(shout.remote("hi"), timeout=60)
    seen = _Seen(capsys)
    assert seen.until(lambda s: f"(shout pid={pid}) task says hi" in s.out), seen.out
    assert seen.until(lambda s: f"(shout pid={pid}) task errs hi" in s.err), seen.err
    assert "_TaskRunner" not in seen.out + seen.err


@ray.remote(num_cpus=0)
class Named:
    def __init__(self, tag):
        self.tag = tag

    def __repr__(self):
        return f"Named({self.tag})"

    def say(self, text):
        print(text)
        return os.getpid()


@pytest.mark.ray_compat
def test_actor_prefix_uses_its_repr_after_init(capsys):
    a = Named.remote("x7")
    pid = ray.get(a.say.remote("repr-prefixed line"), timeout=60)
    seen = _Seen(capsys)
    assert seen.until(lambda s: f"(Named(x7) pid={pid}) repr-prefixed line" in s.out), seen.out
    assert ":actor_name:" not in seen.out + seen.err
    ray.kill(a)


@ray.remote(num_cpus=0)
class Echoer:
    def say(self, text):
        print(text)
        return os.getpid()


@pytest.mark.ray_compat
def test_same_line_from_many_workers_is_printed_once_then_counted(capsys):
    actors = [Echoer.remote() for _ in range(3)]
    pids = set(ray.get([a.say.remote("dedup me please") for a in actors], timeout=60))
    assert len(pids) == 3
    seen = _Seen(capsys)
    assert seen.until(lambda s: "dedup me please" in s.out), seen.out
    # the window (5 s by default) ends; the next line makes it report
    time.sleep(6)
    ray.get(actors[0].say.remote("the next line"), timeout=60)
    assert seen.until(lambda s: "dedup me please [repeated 2x across cluster]" in s.out), seen.out
    assert seen.out.count("dedup me please") == 2, seen.out
    for a in actors:
        ray.kill(a)


@beam_only
def test_dedup_off_prints_every_line():
    from ray._private.worker_logs import Deduplicator

    d = Deduplicator(window_s=5)
    d.enabled = False
    assert d.add("(a pid=1) ", ("1", ""), "x") == ["(a pid=1) x"]
    assert d.add("(a pid=2) ", ("2", ""), "x") == ["(a pid=2) x"]


@beam_only
def test_dedup_one_process_repeating_itself_is_printed():
    from ray._private.worker_logs import Deduplicator

    clock = [0.0]
    d = Deduplicator(window_s=5, timesource=lambda: clock[0])
    d.enabled = True
    assert d.add("(a pid=1) ", ("1", ""), "step 1 done") == ["(a pid=1) step 1 done"]
    assert d.add("(a pid=1) ", ("1", ""), "step 2 done") == ["(a pid=1) step 2 done"]
    assert d.add("(b pid=2) ", ("2", ""), "step 3 done") == []
    clock[0] = 6.0
    assert d.expire() == ["(b pid=2) step 3 done"]  # one held line: printed as it was


@ray.remote
def first_name(word):
    print(f"{word} line of first_name")
    return os.getpid()


@ray.remote
def second_name(word):
    print(f"{word} line of second_name")
    return os.getpid()


@pytest.mark.ray_compat
def test_a_reused_worker_prints_under_each_tasks_name(capsys):
    seen = _Seen(capsys)
    pids = set()
    for word in ("alpha", "beta", "gamma"):  # distinct lines: none is deduplicated
        p1 = ray.get(first_name.remote(word), timeout=60)
        p2 = ray.get(second_name.remote(word), timeout=60)
        pids |= {p1, p2}
        assert seen.until(lambda s: f"(first_name pid={p1}) {word} line of first_name" in s.out), seen.out
        assert seen.until(lambda s: f"(second_name pid={p2}) {word} line of second_name" in s.out), seen.out
    assert "(first_name pid=" not in "".join(line for line in seen.out.splitlines() if "line of second_name" in line)
