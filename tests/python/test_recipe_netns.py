# SPDX-License-Identifier: Apache-2.0
"""vLLM's multi-node recipe, end to end, from a freshly pip-installed venv:
two nodes in network namespaces (as test_cluster_netns.py makes them, with a
default route over the veth so each node finds its address as on a real
machine), `ray start --head --port=6379 --num-gpus 2 --block` in one, the
head's token copied to the other's ~/.ray/auth_token and
`ray start --address=HEAD:6379 --num-gpus 2 --block` there; `ray status`
shows both nodes and 4.0 GPU; the vLLM-shaped demo (scripts/demo.py) runs as
the driver on the head with its workers across both; `ray stop` on each
leaves no process in either namespace.

Needs root and `ip netns`; skipped otherwise."""

import os
import re
import shutil
import subprocess
import time

from beamkit import REPO
from beamkit import venv as venv_util
from beamkit.netns import NetnsPair, ip_cmd, needs_netns
from beamkit.venv import Node, read_until

pytestmark = [needs_netns, venv_util.skip_in_sanitizer_pass]


def _ns_pids(ns):
    return subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()


def test_vllm_recipe_across_two_namespaces():
    venv = venv_util.installed_venv()
    pair = NetnsPair()
    procs = []
    try:
        ip_cmd("route", "add", "default", "via", pair.ip_b, ns=pair.a)
        ip_cmd("route", "add", "default", "via", pair.ip_a, ns=pair.b)
        head = Node(venv, wrap=pair.wrap(pair.a))
        member = Node(venv, wrap=pair.wrap(pair.b))

        t0 = time.monotonic()
        hp = head.popen(head.bin("ray"), "start", "--head", "--port=6379", "--num-gpus", "2", "--block")
        procs.append(hp)
        read_until(hp, "Ray runtime started.")
        ready_s = time.monotonic() - t0
        text = read_until(hp, "This command will now block forever")
        assert f"ray start --address='{pair.ip_a}:6379'" in text, text
        print(f"`ray start --head` to ready: {ready_s:.2f} s (beamd: {text.split('ready in ')[1].split()[0]} s)")

        # the head made the cluster token; the user copies it to the other node
        os.makedirs(os.path.join(member.home, ".ray"), mode=0o700)
        shutil.copy(os.path.join(head.home, ".ray", "auth_token"), os.path.join(member.home, ".ray", "auth_token"))
        mp = member.popen(member.bin("ray"), "start", f"--address={pair.ip_a}:6379", "--num-gpus", "2", "--block")
        procs.append(mp)
        assert f"Local node IP: {pair.ip_b}" in read_until(mp, "This command will now block forever")

        st = head.ray("status")
        assert st.returncode == 0, st.stderr
        assert st.stdout.count("\n 1 node_") == 2, st.stdout
        assert [ln for ln in st.stdout.splitlines() if "GPU" in ln] == [" 0.0/4.0 GPU"], st.stdout
        assert member.ray("list", "nodes").stdout.count("ALIVE") == 2

        demo = head.run(
            head.bin("python"), os.path.join(REPO, "scripts", "demo.py"), timeout=120, env={"DEMO_WORLD_SIZE": "4"}
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr + open(head.session()["log"]).read()
        by_rank = re.search(r"4 workers up; \(node, GPU ids\) by rank: (.*)", demo.stdout).group(1)
        assert len(set(re.findall(r"\('([0-9a-f]{8})'", by_rank))) == 2, by_rank
        assert "monitor noticed the death" in demo.stdout
        assert "shut down: every worker stopped" in demo.stdout

        for node, p in ((member, mp), (head, hp)):
            out = node.ray("stop")
            assert out.returncode == 0 and "Stopped all" in out.stdout, out
            assert p.wait(20) == 0
        assert _ns_pids(pair.a) == [] and _ns_pids(pair.b) == []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        pair.close()
