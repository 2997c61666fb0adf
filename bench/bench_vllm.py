# SPDX-License-Identifier: Apache-2.0
"""Real vLLM on beam, on real Ray 2.43.0 and on vLLM's own `mp` backend,
side by side: start-up (from LLM(...) to ready) and greedy generation
throughput of the kit's tiny model (TP=2, 12 prompts x 64 tokens, one node
of 2 pretend GPUs), the three alternated in one run, medians and ratios.

    bash tests/vllm_e2e/setup.sh beam && bash tests/vllm_e2e/setup.sh ray
    python3 bench/bench_vllm.py [--runs 5] [--rounds 4]

Each run starts a fresh node (`ray start --head --num-gpus 2 --num-cpus 2`,
as a user does) and a fresh LLM; throughput is the median of the rounds
after the first (the first warms up). Each process's CPU milliseconds per
generated token, from /proc, over the last round, are printed per backend
(medians over the runs, by role). Needs root (the kit's pids cgroup)."""

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "vllm_e2e"))

import kit  # noqa: E402

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


def one(backend, model, rounds):
    venv = os.path.join(HOME, "ray" if backend == "ray" else "beam")
    run = kit.Run(venv, f"bench-{backend}")
    try:
        env = run.env()
        if backend != "mp":
            run.start_head(env, num_gpus=2, num_cpus=2)
        res = run.generate(
            model, env, "--backend", "mp" if backend == "mp" else "ray", "--tp", "2", "--rounds", str(rounds)
        )
        if backend != "mp":
            run.stop(env)
        cpu = {}
        for key, ms in res["cpu_ms_per_token"].items():
            r = role(key.split(" ", 1)[1])
            cpu[r] = cpu.get(r, 0.0) + ms
        tput = statistics.median(r["tok_per_s"] for r in res["rounds"][1:])
        return res["startup_s"], tput, cpu, res["token_ids"]
    finally:
        run.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--backends", default="beam,ray,mp")
    a = ap.parse_args()
    backends = a.backends.split(",")
    d = tempfile.mkdtemp(prefix="vk-bench-", dir="/tmp")
    model = kit.make_model(os.path.join(HOME, "beam"), os.path.join(d, "tiny-llama"))
    seen = {b: {"startup": [], "tput": [], "cpu": []} for b in backends}
    tokens = {}
    for i in range(a.runs):
        for b in backends if i % 2 == 0 else backends[::-1]:
            s, t, cpu, toks = one(b, model, a.rounds)
            tokens.setdefault(b, toks)
            seen[b]["startup"].append(s)
            seen[b]["tput"].append(t)
            seen[b]["cpu"].append(cpu)
            print(f"run {i + 1} {b:4s}: start-up {s:6.1f} s, {t:8.1f} tok/s", flush=True)
    same = all(tokens[b] == tokens[backends[0]] for b in backends)
    print(f"\nsame greedy tokens on {', '.join(backends)}: {same}")
    print(f"{'backend':8s} {'start-up s (median)':>20s} {'tok/s (median)':>15s}   all runs")
    for b in backends:
        print(
            f"{b:8s} {statistics.median(seen[b]['startup']):20.1f} {statistics.median(seen[b]['tput']):15.1f}"
            f"   {[round(x) for x in seen[b]['tput']]}"
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
