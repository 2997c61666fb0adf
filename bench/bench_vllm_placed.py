# SPDX-License-Identifier: Apache-2.0
"""vLLM's slow mode on a 2-core machine, forced: the kit's TP=2 run (as
bench_vllm.py's) with both TP workers pinned to CPU 1 and the engine core to
CPU 0 (a new thread within 50 ms, every thread again each second), beam and
real Ray alternated; prints each round's tok/s and where the workers' CPU
went, thread by thread (ticks from /proc). bench_vllm.py's runs fall into
this placement a share of the time on either backend (its "one CPU"
column); here every round is in it, so the two backends' slow modes can be
compared on their own.

    bash tests/vllm_e2e/setup.sh beam && bash tests/vllm_e2e/setup.sh ray
    python3 bench/bench_vllm_placed.py [--runs 2] [--tick-hz 0,1000] [--sched-s 3]

What sets the speed here is less either backend's code than the kernel.
vLLM's CPU all-reduce (shm_cc_loop in vLLM's _C) waits for its peer by
spinning, without yielding, so on one CPU the worker that arrives first burns
CPU until something preempts it (at worst the 4 ms tick). A woken thread of
nice 0 preempts a nice-15 worker at once; a woken nice-15 one (gloo's loop
threads, beam's) seldom. Ray's workers keep their runtime's threads at nice 0
(only the main thread is niced) and Ray's raylet, GCS and idle workers wake
on that CPU too: --sched-s shows some 560 nice-0 wake-ups a second on CPU 1
under Ray against 100 to 200 under beam (the _beam client's thread in each
worker; 20 while beam niced every thread of its workers), and a Ray
worker's run is cut short 1.3 to 1.6 times as often. A do-nothing
--tick-hz 1000 ticker (nice 0) on CPU 1 roughly doubles both backends'
throughput.

Needs root (the kit's pids cgroup)."""

import argparse
import collections
import os
import re
import statistics
import subprocess
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
    and the workers' threads' last CPU ticks. Light, as it shares the CPUs
    it measures: every 50 ms it pins the threads it has not pinned yet, and
    every second it pins them all again and reads their ticks."""

    def __init__(self, group):
        self.group = group
        self.done = threading.Event()
        self.ticks = {}  # (pid, tid) -> (its name now, its ticks): a thread renamed counts once
        self.pinned = set()  # (pid, tid)
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        n = 0
        while not self.done.wait(0.05):
            n += 1
            again = n % 20 == 0
            for pid in self.group.pids():
                worker = kp.is_vllm_worker(pid)
                if not worker and "EngineCor" not in kp.cmdline(pid):
                    continue
                for tid in threads(pid):
                    if (pid, tid) in self.pinned and not again:
                        continue
                    try:
                        os.sched_setaffinity(tid, {1} if worker else {0})
                        self.pinned.add((pid, tid))
                    except OSError:
                        pass  # gone meanwhile
                    if worker and again:
                        ticks, name = thread_ticks(pid, tid)
                        if ticks is not None:
                            self.ticks[(pid, tid)] = (name, ticks)


class Ticker:
    """--tick-hz: a process on CPU 1 at nice 0 that only sleeps and wakes,
    HZ times a second: each wake-up lets the kernel preempt whichever worker
    is spinning there (vLLM's shm all-reduce waits for its peer without
    yielding), so the two workers trade CPU 1 often instead of at the end of
    a slice."""

    def __init__(self, hz):
        code = "import time\nd = 1.0 / %r\nwhile True:\n    time.sleep(d)\n" % float(hz)
        self.p = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", code]) if hz else None

    def close(self):
        if self.p:
            self.p.kill()
            self.p.wait()


def round_started(mark, r, done):
    """Waits until generate.py marks round r begun (its VLLM_KIT_ROUND_MARK
    file); False if done is set first."""
    while not done.wait(0.05):
        try:
            with open(mark) as f:
                if str(r) in f.read().split()[0::2]:
                    return True
        except OSError:
            pass
    return False


SWITCH = re.compile(
    r"\s*([\d.]+): sched:sched_switch: prev_comm=.+? prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) "
    r"==> next_comm=.+? next_pid=(\d+) next_prio=(\d+)"
)
WAKEUP = re.compile(r"\s*[\d.]+: sched:sched_wakeup: comm=.+? pid=\d+ prio=(\d+) target_cpu=0*1$")


class Sched:
    """--sched-s: the scheduler's events on CPU 1 (perf's sched_switch and
    sched_wakeup) for that many seconds from the second measured round on,
    summed up: how long the workers' main threads ran at a stretch, and who
    woke on CPU 1 and cut a worker's run short, by priority (120 is nice 0,
    135 nice 15). A worker spinning in the all-reduce for its peer stops only
    when something preempts it; a woken thread of nice 0 preempts a nice-15
    one at once, a nice-15 one seldom (its virtual deadline is as far off)."""

    def __init__(self, run, seconds):
        self.run, self.seconds = run, seconds
        self.done = threading.Event()
        self.summary = None
        self.env = {}  # what generate.py needs to mark its rounds: nothing unless capturing
        if seconds:
            folder = run.tmpdir("vk-sched-")
            self.mark, self.data = os.path.join(folder, "rounds"), os.path.join(folder, "sched.data")
            self.env["VLLM_KIT_ROUND_MARK"] = self.mark
            threading.Thread(target=self._capture, daemon=True).start()

    def _capture(self):
        if not round_started(self.mark, 2, self.done):
            return
        mains = [p for p in self.run.group.pids() if kp.is_vllm_worker(p)]
        subprocess.run(
            ["perf", "record", "-q", "-C", "1", "-e", "sched:sched_switch,sched:sched_wakeup", "-o", self.data]
            + ["--", "sleep", str(self.seconds)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        script = ["perf", "script", "-i", self.data, "-F", "time,event,trace"]
        out = subprocess.run(script, capture_output=True, text=True)
        self.summary = self._sum(out.stdout.splitlines(), set(mains))

    @staticmethod
    def _sum(lines, mains):
        runs, started, woke, cut = [], {}, collections.Counter(), collections.Counter()
        first = last = None
        for line in lines:
            m = WAKEUP.match(line)
            if m:
                woke[m[1]] += 1
                continue
            m = SWITCH.match(line)
            if not m:
                continue
            t, prev, state, nxt, nprio = float(m[1]), int(m[2]), m[3], int(m[4]), m[5]
            first, last = first or t, t
            if prev in started:
                runs.append(t - started.pop(prev))
                if state == "R" and nxt not in mains:
                    cut[nprio] += 1
            if nxt in mains:
                started[nxt] = t
        span = (last - first) if runs else 0
        if not span:
            return "no events"
        long_share = sum(r for r in runs if r >= 0.002) / sum(runs)
        per_s = lambda c: {k: round(v / span) for k, v in sorted(c.items())}  # noqa: E731
        return (
            f"workers' time in runs of 2 ms or more {100 * long_share:.0f}%; "
            f"wake-ups on CPU 1 a second by prio {per_s(woke)}; a worker cut short a second by prio {per_s(cut)}"
        )

    def close(self):
        self.done.set()


def one(backend, model, rounds, tick_hz=0, sched_s=0):
    run = kit.Run(os.path.join(HOME, backend), f"placed-{backend}")
    pinner = Pinner(run.group)
    ticker = Ticker(tick_hz)
    sched = Sched(run, sched_s)
    try:
        env = run.env(**sched.env)
        run.start_head(env, num_gpus=2, num_cpus=2)
        res = run.generate(model, env, "--backend", "ray", "--tp", "2", "--rounds", str(rounds))
        run.stop(env)
        by_thread = collections.Counter()
        for (pid, _), (name, ticks) in pinner.ticks.items():
            by_thread[(pid, name)] += ticks
        return [r["tok_per_s"] for r in res["rounds"][1:]], by_thread, sched.summary
    finally:
        sched.close()
        ticker.close()
        pinner.done.set()
        run.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sched-s", type=float, default=0, help="capture CPU 1's scheduler events this long (Sched)")
    ap.add_argument(
        "--tick-hz", default="0", help="comma-separated: each run alternates these (0: no ticker; else a Ticker's rate)"
    )
    a = ap.parse_args()
    tick_rates = [float(x) for x in a.tick_hz.split(",")]
    model = kit.make_model(os.path.join(HOME, "beam"), os.path.join(tempfile.mkdtemp(prefix="vk-placed-"), "m"))
    rates_of = collections.defaultdict(list)
    for _ in range(a.runs):
        for hz in tick_rates:
            for backend in ("beam", "ray"):
                rates, by_thread, sched = one(backend, model, a.rounds, hz, a.sched_s)
                rates_of[(backend, hz)] += rates
                busy = [(name, ticks) for (_, name), ticks in by_thread.most_common(6)]
                print(
                    f"{backend:4} ticker {hz:g} Hz: rounds' tok/s {[round(r) for r in rates]}; "
                    f"workers' busiest threads (ticks) {busy}",
                    flush=True,
                )
                if sched:
                    print(f"     scheduler, CPU 1: {sched}", flush=True)
    for hz in tick_rates:
        b, r = statistics.median(rates_of[("beam", hz)]), statistics.median(rates_of[("ray", hz)])
        print(f"ticker {hz:g} Hz: median round beam {b:.0f} tok/s, Ray {r:.0f} tok/s, beam/Ray {b / r:.2f}")


if __name__ == "__main__":
    main()
