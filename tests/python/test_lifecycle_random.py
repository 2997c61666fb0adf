# SPDX-License-Identifier: Apache-2.0
"""The randomized lifecycle test: three drivers create, call, release and
kill actors (with and without GPUs), create and remove placement groups
(some that cannot fit), put/get/wait, and die, at random, against a real
beamd; the daemon must stay up and come back to empty (see beamkit/lifecycle.py for
every invariant). It runs in both passes of scripts/test.sh, the normal
build and the ASan/UBSan one.

CI runs a fixed seed and a few random ones, a bounded number of steps each;
every seed is printed (and named in a failure with the command that replays
it). Environment:

- BEAM_LIFECYCLE_STEPS: steps of the fixed-seed run (default 400; each random
  seed runs 3/8 of it);
- BEAM_LIFECYCLE_SEED: run only this seed (replay a failure);
- BEAM_LIFECYCLE_SEEDS: how many random seeds (default 2).

Longer runs: scripts/lifecycle_random.py.
"""

import os
import random

import pytest

from beamkit import lifecycle

FIXED_SEED = 20261203
STEPS = int(os.environ.get("BEAM_LIFECYCLE_STEPS", "400"))
ONLY = os.environ.get("BEAM_LIFECYCLE_SEED")
NSEEDS = int(os.environ.get("BEAM_LIFECYCLE_SEEDS", "2"))


def _seeds():
    if ONLY:
        return [pytest.param(int(ONLY), STEPS, id=f"seed{ONLY}")]
    rnd = random.SystemRandom()
    out = [pytest.param(FIXED_SEED, STEPS, id="fixed")]
    for i in range(NSEEDS):
        seed = rnd.randrange(1, 2**31)
        out.append(pytest.param(seed, max(1, STEPS * 3 // 8), id=f"random{i}"))
    return out


@pytest.mark.parametrize("seed,steps", _seeds())
def test_lifecycle_random(seed, steps, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    print(
        f"lifecycle: seed={seed} steps={steps}  (replay: BEAM_LIFECYCLE_SEED={seed} "
        f"BEAM_LIFECYCLE_STEPS={steps} pytest tests/python/test_lifecycle_random.py)",
        flush=True,
    )
    stats = lifecycle.run(seed, steps, drivers=3, quiesce_every=50)
    print("lifecycle:", sorted(stats.items()))
    # the run did what it is for: these paths were all taken
    for what in ("create", "call", "get", "del", "pg_create", "quiesce"):
        assert stats.get(what, 0) > 0, (what, stats)


def test_lifecycle_random_direct_calls(monkeypatch):
    """The fixed seed again with the drivers' direct calls on
    (BEAM_DIRECT_CALLS=1, docs/DESIGN.md "Direct calls"): calls, kills,
    deaths of workers and of drivers on both paths, the same invariants."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("BEAM_DIRECT_CALLS", "1")
    steps = max(1, STEPS * 3 // 8)
    print(f"lifecycle (direct calls): seed={FIXED_SEED} steps={steps}", flush=True)
    stats = lifecycle.run(FIXED_SEED, steps, drivers=3, quiesce_every=50)
    print("lifecycle:", sorted(stats.items()))
    for what in ("create", "call", "get", "del", "quiesce"):
        assert stats.get(what, 0) > 0, (what, stats)


# --- what the randomized run found, as plain tests ---------------------------------

import textwrap  # noqa: E402

from beamkit.daemon import run_driver  # noqa: E402
from beamkit.procs import wait_until  # noqa: E402

SELF_CARRIER = textwrap.dedent("""
    import os, ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init()

    @ray.remote
    class A:
        def echo(self, x):
            return x

    if "{how}" == "owner_exits":
        a = A.options(num_gpus=5).remote()      # never fits: its calls stay queued
    else:
        pg = placement_group([{{"CPU": 1}}])
        ray.get(pg.ready(), timeout=30)
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
        b = A.options(num_cpus=1, scheduling_strategy=strategy).remote()   # takes the bundle
        a = A.options(num_cpus=1, scheduling_strategy=strategy).remote()   # waits for it
    r = a.echo.remote(a)    # a queued call that carries a's own handle: it pins a
    del a                   # no handle left; the call's pin keeps a
    ray.get(ray.put(1))     # the submit and the release have reached beamd
    if "{how}" == "owner_exits":
        os._exit(0)         # the owner goes: beamd kills a
    remove_placement_group(pg)   # a dies with its group
    ray.get(ray.put(2))
    print("removed", flush=True)
""")


def _daemon_alive(beamd):
    assert beamd.proc.poll() is None, f"beamd died ({beamd.proc.returncode}):\n{beamd.read_log()[-6000:]}"


def _empty(beamd, drivers=0):
    st = beamd.status()
    return (
        all(a["state"] == "DEAD" and not a["pid"] for a in st["actors"])
        and st["objects"]["count"] == 0
        and st["clients"]["drivers"] == drivers
        and st["resources_available"] == st["resources_total"]
    )


@pytest.mark.parametrize("how", ["owner_exits", "group_removed"])
def test_a_dying_actor_whose_queued_call_carries_its_own_handle(beamd, how):
    """Found by a long lifecycle run under ASan: an actor with no handle
    left but a queued call whose arguments carry its own handle (the call's
    pin was the last thing keeping it) is killed, by its owner leaving or its
    group's removal. actor_die() fails the queued call, the call's refs
    unpin the actor, and beam_actor_unpin() -> maybe_free() frees it while
    actor_die() still walks its queue: heap-use-after-free (SIGSEGV in the
    normal build)."""
    p = run_driver(SELF_CARRIER.format(how=how), env={"BEAM_SOCKET": beamd.socket})
    _daemon_alive(beamd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert how == "owner_exits" or "removed" in p.stdout, p.stderr[-3000:]
    assert wait_until(lambda: _empty(beamd), 10), beamd.status()
    _daemon_alive(beamd)
