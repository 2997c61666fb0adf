# SPDX-License-Identifier: Apache-2.0
"""beamkit: the one kit the Python tests (and the fuzz corpus scripts and
benchmarks) start and speak to beam with. Test modules hold tests only;
what they share lives here, and fixtures live in conftest.py.

    wire     the msgpack codec and framing, FrameSocket (frames off a socket)
    procs    /proc: alive(pid), beam_processes, wait_until / wait_gone /
             wait_file, rss_kib, fd_count, free_port
    daemon   Node, Beamd (one daemon), Cluster (a head and members),
             one_ray_for_module, run_driver / start_driver (a driver process),
             driver_env, pointed_at
    client   Conn (the raw unix client), Ids, expect_error, Watcher
    link     the cluster link by hand: MACs, SealedStream, RawPeer, SealedPeer
    pg       placement groups through Ray's API: pg_api(), pg_strategy()
    netns    two network namespaces joined by a veth pair
    gloo     GlooComm, a gloo communicator for compiled graphs (needs ray, torch)
    venv     a venv with beam pip-installed, and `ray` run from it
    suite    the suite's own folder and environment (Ray temp folder, HOME,
             default socket, TMPDIR), per test; leftovers at the end
    vllm     the vLLM snapshot and the interpreter the scanner tests use
    lifecycle  the randomized lifecycle run (test_lifecycle_random.py,
             scripts/lifecycle_random.py); its drivers run lifecycle_driver

The fuzz corpus scripts (tests/fuzz/make_*_corpus.py) pack with wire, and
bench/ starts its daemons with daemon and reads /proc with procs.

The package needs only the standard library (and pytest): the ray_compat
modules import it under real Ray's interpreter too.
"""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
