# SPDX-License-Identifier: Apache-2.0
"""vLLM's slow mode on a 2-core machine, forced: the kit's TP=2 run (as
bench_vllm.py's) with both TP workers pinned to CPU 1 and the engine core to
CPU 0 (every thread, re-pinned every 50 ms while the run lasts), beam and
real Ray alternated; prints each round's tok/s and where the workers' CPU
went, thread by thread (ticks from /proc). bench_vllm.py's runs fall into
this placement a share of the time on either backend (its "one CPU"
column); here every round is in it, so the two backends' slow modes can be
compared on their own.

    bash tests/vllm_e2e/setup.sh beam && bash tests/vllm_e2e/setup.sh ray
    python3 bench/bench_vllm_placed.py [--runs 2]

Needs root (the kit's pids cgroup)."""

import argparse
import collections
import os
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "vllm_e2e"))

import kit  # noqa: E402
import vllm_kit_procs as kp  # noqa: E402

HOME = os.environ.get("VLLM_KIT_HOME", "/opt/vllm-kit")


def threads(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def thread_ticks(pid, tid):
    """(user + system ticks, name) of one thread, or (None, None) once gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            stat = f.read()
    except OSError:
        return None, None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12]), stat[stat.index("(") + 1 : stat.rindex(")")]


class Pinner:
    """Keeps the run's vLLM workers on CPU 1 and its engine core on CPU 0,
    and the workers' threads' last CPU ticks."""

    def __init__(self, group):
        self.group = group
        self.done = threading.Event()
        self.ticks = {}  # (pid, tid) -> (its name now, its ticks): a thread renamed counts once
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while not self.done.wait(0.05):
            for pid in self.group.pids():
                worker = kp.is_vllm_worker(pid)
                if not worker and "EngineCor" not in kp.cmdline(pid):
                    continue
                for tid in threads(pid):
                    try:
                        os.sched_setaffinity(tid, {1} if worker else {0})
                    except OSError:
                        pass  # gone meanwhile
                    if worker:
                        ticks, name = thread_ticks(pid, tid)
                        if ticks is not None:
                            self.ticks[(pid, tid)] = (name, ticks)


def one(backend, model, rounds):
    run = kit.Run(os.path.join(HOME, backend), f"placed-{backend}")
    pinner = Pinner(run.group)
    try:
        env = run.env()
        run.start_head(env, num_gpus=2, num_cpus=2)
        res = run.generate(model, env, "--backend", "ray", "--tp", "2", "--rounds", str(rounds))
        run.stop(env)
        by_thread = collections.Counter()
        for (pid, _), (name, ticks) in pinner.ticks.items():
            by_thread[(pid, name)] += ticks
        return [r["tok_per_s"] for r in res["rounds"][1:]], by_thread
    finally:
        pinner.done.set()
        run.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    model = kit.make_model(os.path.join(HOME, "beam"), os.path.join(tempfile.mkdtemp(prefix="vk-placed-"), "m"))
    for _ in range(a.runs):
        for backend in ("beam", "ray"):
            rates, by_thread = one(backend, model, a.rounds)
            busy = [(name, ticks) for (_, name), ticks in by_thread.most_common(6)]
            print(f"{backend:4}: rounds' tok/s {[round(r) for r in rates]}; workers' busiest threads (ticks) {busy}")


if __name__ == "__main__":
    main()
