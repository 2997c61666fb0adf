# SPDX-License-Identifier: Apache-2.0
"""The randomized lifecycle test: three drivers create, call, release and
kill actors (with and without GPUs), create and remove placement groups
(some that cannot fit), put/get/wait, and die, at random, against a real
beamd; the daemon must stay up and come back to empty (see lifecycle.py for
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

import lifecycle

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
    print(f"lifecycle: seed={seed} steps={steps}  (replay: BEAM_LIFECYCLE_SEED={seed} "
          f"BEAM_LIFECYCLE_STEPS={steps} pytest tests/python/test_lifecycle_random.py)", flush=True)
    stats = lifecycle.run(seed, steps, drivers=3, quiesce_every=50)
    print("lifecycle:", sorted(stats.items()))
    # the run did what it is for: these paths were all taken
    for what in ("create", "call", "get", "del", "pg_create", "quiesce"):
        assert stats.get(what, 0) > 0, (what, stats)
