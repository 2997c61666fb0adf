# SPDX-License-Identifier: Apache-2.0
"""Real vLLM on beam, on real Ray 2.43.0 and on vLLM's own `mp` backend,
side by side: start-up (from LLM(...) to ready) and greedy generation
throughput of the kit's tiny model (TP=2, 12 prompts x 64 tokens, one node
of 2 pretend GPUs), the three alternated in one run, medians and ratios.

    bash tests/vllm_e2e/setup.sh beam && bash tests/vllm_e2e/setup.sh ray
    python3 bench/bench_vllm.py [--runs 5] [--rounds 4]

Each run starts a fresh node (`ray start --head --num-gpus 2 --num-cpus 2`,
as a user does) and a fresh LLM; a run's throughput is its tokens over its
seconds in the rounds after the first (the first warms up), and the table
gives the median over runs of that and of each round's own rate. Each
process's CPU milliseconds per generated token, from /proc, over the last
round, are printed per backend (medians over the runs, by role). Needs root
(the kit's pids cgroup).

Why rates swing between runs on a 2-core machine (on every backend): the
engine core busy-polls vLLM's shared-memory queue at nice 0 while the two
TP workers run at Ray's worker niceness, 15; the kernel's load balancer
then prefers the two light workers together on one CPU, where each waits
for the other's all-reduce a time slice at a time (about 300 tok/s here),
over one of them beside the engine core, which yields (about 2,800). A
round keeps whichever placement it starts in until a rebalance. The bench
samples where the workers run every 20 ms and prints the share of the
measured time they shared one CPU, so each figure says which placement it
measured."""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "vllm_e2e"))

import kit  # noqa: E402
import vllm_kit_procs as kp  # noqa: E402

HOME = os.environ.get("VLLM_KIT_HOME", "/opt/vllm-kit")


def role(title):
    """A process's role from its title (beam, Ray and mp name them differently)."""
    t = title.lower()
    for pat, name in (
        ("enginecore", "engine core"),
        ("worker", "worker"),
        ("beamd", "beamd"),
        ("raylet", "raylet"),
        ("gcs_server", "gcs"),
        ("generate.py", "driver"),
        ("resource_tracker", "resource tracker"),
    ):
        if pat in t:
            return name
    return "other ray"


class Placement:
    """Samples, every 20 ms while a run generates, whether its two vLLM
    workers last ran on the same CPU."""

    def __init__(self, group):
        self.group = group
        self.samples = []  # (time, True if both workers on one CPU)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        workers = []
        while not self.done.wait(0.02):
            if len(workers) < 2:
                workers = [p for p in self.group.pids() if kp.is_vllm_worker(p)][:2]
                continue
            cpus = [kp.last_cpu(p) for p in workers]
            if None not in cpus:
                self.samples.append((time.time(), cpus[0] == cpus[1]))

    def stop(self):
        self.done.set()
        self.thread.join()

    def shared(self, rounds):
        """The share of the samples taken during these rounds with both
        workers on one CPU (None when none were taken)."""
        seen = [same for t, same in self.samples for r in rounds if r["end"] - r["seconds"] <= t < r["end"]]
        return sum(seen) / len(seen) if seen else None


def one(backend, model, rounds):
    venv = os.path.join(HOME, "ray" if backend == "ray" else "beam")
    run = kit.Run(venv, f"bench-{backend}")
    placement = Placement(run.group)
    try:
        env = run.env()
        if backend != "mp":
            run.start_head(env, num_gpus=2, num_cpus=2)
        res = run.generate(
            model, env, "--backend", "mp" if backend == "mp" else "ray", "--tp", "2", "--rounds", str(rounds)
        )
        placement.stop()
        if backend != "mp":
            run.stop(env)
        cpu = {}
        for key, ms in res["cpu_ms_per_token"].items():
            r = role(key.split(" ", 1)[1])
            cpu[r] = cpu.get(r, 0.0) + ms
        measured = res["rounds"][1:]
        tput = sum(r["tokens"] for r in measured) / sum(r["seconds"] for r in measured)
        per_round = [r["tok_per_s"] for r in measured]
        return res["startup_s"], tput, per_round, placement.shared(measured), cpu, res["token_ids"]
    finally:
        placement.stop()
        run.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--backends", default="beam,ray,mp")
    a = ap.parse_args()
    backends = a.backends.split(",")
    d = tempfile.mkdtemp(prefix="vk-bench-", dir="/tmp")
    model = kit.make_model(os.path.join(HOME, "beam"), os.path.join(d, "tiny-llama"))
    seen = {b: {"startup": [], "tput": [], "rounds": [], "shared": [], "cpu": []} for b in backends}
    tokens = {}
    for i in range(a.runs):
        for b in backends if i % 2 == 0 else backends[::-1]:
            s, t, per_round, shared, cpu, toks = one(b, model, a.rounds)
            tokens.setdefault(b, toks)
            seen[b]["startup"].append(s)
            seen[b]["tput"].append(t)
            seen[b]["rounds"] += per_round
            seen[b]["cpu"].append(cpu)
            where = "" if shared is None else f", TP workers on one CPU {100 * shared:3.0f}% of the time"
            if shared is not None:
                seen[b]["shared"].append(shared)
            rates = " ".join(str(round(x)) for x in per_round)
            print(f"run {i + 1} {b:4s}: start-up {s:6.1f} s, {t:8.1f} tok/s{where} (rounds: {rates})", flush=True)
    same = all(tokens[b] == tokens[backends[0]] for b in backends)
    print(f"\nsame greedy tokens on {', '.join(backends)}: {same}")
    head = f"{'backend':8s} {'start-up s':>11s} {'tok/s':>8s} {'round tok/s':>12s} {'one CPU':>8s}   runs' tok/s"
    print(head + "\n" + " " * 9 + "(medians: of runs; of runs; of all rounds; mean share of time)")
    for b in backends:
        shared = f"{100 * statistics.mean(seen[b]['shared']):7.0f}%" if seen[b]["shared"] else f"{'-':>8s}"
        print(
            f"{b:8s} {statistics.median(seen[b]['startup']):11.1f} {statistics.median(seen[b]['tput']):8.1f}"
            f" {statistics.median(seen[b]['rounds']):12.1f} {shared}   {[round(x) for x in seen[b]['tput']]}"
        )
    if "beam" in seen and "ray" in seen:
        rs = [x / y for x, y in zip(seen["beam"]["tput"], seen["ray"]["tput"])]
        ss = [x / y for x, y in zip(seen["beam"]["startup"], seen["ray"]["startup"])]
        print(f"beam/ray throughput, pair by pair: {[round(r, 2) for r in rs]}, median {statistics.median(rs):.2f}")
        print(f"beam/ray start-up, pair by pair:   {[round(r, 2) for r in ss]}, median {statistics.median(ss):.2f}")
    print("\nCPU ms per generated token (last round, median over runs), by process role:")
    for b in backends:
        roles = sorted({r for c in seen[b]["cpu"] for r in c})
        parts = [f"{r} {statistics.median(c.get(r, 0.0) for c in seen[b]['cpu']):.3f}" for r in roles]
        print(f"  {b:5s}: " + ", ".join(parts))
    import shutil

    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
