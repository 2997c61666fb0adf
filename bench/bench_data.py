#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Large values: beam against real Ray 2.43 in one run, alternated, as
medians and the ratio beam/Ray (lower is better for beam).

    source build/env.sh && $BEAM_PYTHON bench/bench_data.py [--quick] [--rounds N] [--ray-python PATH]

For numpy arrays of 64 KiB, 1 MiB and 64 MiB: put+get (``ray.get(ray.put(x))``),
an actor's return (``ray.get(a.make.remote(n))``, the array made in the
actor) and an actor argument (``ray.get(a.size.remote(x))``, the actor
reads one byte of it). Every row is warmed the same way on both sides
before it is timed: ``WARM`` calls of it first (3 at 64 MiB, 10 below;
one with --quick), discarded, so neither side's store or pool meets the
row cold, whatever rows ran before it (Ray's store costs new pages on its
first pass over its memory: a 64 MiB put 25 ms cold, 6.5 ms warm; beam's
producer pool likewise). Each side runs in its own interpreter (bench_vs_ray.py's
way: Ray with /opt/ray-venv, beam's python/ off its path); the sides take
turns, --rounds times, and each figure is the median over every round's
medians. ``--before TREE`` adds a third side in the same turns, the beam
of another checkout (its build if it has one, else its python/ on this
build), with its own ratio to Ray; ``--no-cgraph`` leaves out the
compiled-graph rows. The beam side also prints beamd's RSS before and after (kB).

"cgraph edge": a step of a 2-actor compiled graph on one node whose edge
carries a numpy array of that size (the first actor returns one it keeps,
the second answers its size), in three sides alternated: beam, beam with
the edge's shared-memory slots off (BEAM_CGRAPH_SHM_MIN past any size: the
socket path, main's before the slots) and Ray 2.43. ``--cgraph-only`` runs
only these rows. ``--gpu`` adds the CUDA-tensor figures on beam (device to
host through tensors.Stage, a cgraph edge, ray.get of one made in an actor)
beside torch's own pinned and pageable copies; without CUDA it says so and
skips them.
"""

import argparse
import json
import os
import statistics
import sys

from benchutil import fmt, side_envs, side_in_subprocess, timed

SIZES = (("64 KiB", 64 << 10), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20))
KINDS = ("put+get", "return", "argument")
WARM = (10, 3)  # calls of a row before it is timed, discarded: below 32 MiB, at or past it


class Store:
    """The actor: makes arrays and reads the ones it is given."""

    def make(self, n):
        import numpy

        return numpy.ones(n, dtype=numpy.uint8)

    def size(self, x):
        return int(x[-1]) + x.nbytes


def _daemon_rss(ray):
    """beamd's resident set in kB (None on real Ray)."""
    if getattr(ray, "__commit__", "") != "beam":
        return None
    from ray._private import worker

    with open(f"/proc/{worker.status()['pid']}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def run_side(quick):
    import numpy

    import ray

    init_kw = {"num_cpus": 2, "num_gpus": 0}
    if getattr(ray, "__commit__", "") != "beam":
        init_kw.update(include_dashboard=False, log_to_driver=False)
    ray.init(**init_kw)
    a = ray.remote(num_cpus=0)(Store).remote()
    ray.get(a.make.remote(1))
    out = {"rss_before": _daemon_rss(ray)}
    for label, n in SIZES:
        reps = (3 if quick else 10) if n >= 32 << 20 else (20 if quick else 100)
        warm = 1 if quick else WARM[n >= 32 << 20]
        x = numpy.ones(n, dtype=numpy.uint8)
        for kind, fn in (
            ("put+get", lambda: ray.get(ray.put(x))),
            ("return", lambda: ray.get(a.make.remote(n))),
            ("argument", lambda: ray.get(a.size.remote(x))),
        ):
            for _ in range(warm):
                fn()
            out[f"{kind} {label}"] = timed(fn, reps)
    out["rss_after"] = _daemon_rss(ray)
    ray.shutdown()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--rounds", type=int, default=3, help="turns each side takes (alternated)")
    ap.add_argument("--ray-python", default="/opt/ray-venv/bin/python")
    ap.add_argument("--side", metavar="OUT", help=argparse.SUPPRESS)
    ap.add_argument("--side-kind", default="data", help=argparse.SUPPRESS)
    ap.add_argument("--cgraph-only", action="store_true", help="only the cgraph edge rows")
    ap.add_argument("--gpu", action="store_true", help="add the CUDA-tensor figures (beam and torch)")
    ap.add_argument("--before", metavar="TREE", help="a third side: the beam of another checkout (e.g. main's)")
    ap.add_argument("--no-cgraph", action="store_true", help="without the cgraph edge rows")
    args = ap.parse_args()
    if args.side:
        run = {"data": run_side, "cgraph": cgraph_side, "gpu": gpu_side}[args.side_kind]
        with open(args.side, "w") as f:
            json.dump(run(args.quick), f)
        return
    if args.cgraph_only or args.gpu:
        if args.cgraph_only:
            cgraph_table(args)
        if args.gpu:
            gpu_table(args)
        return
    base, ray_env = side_envs()
    extra = ["--quick"] if args.quick else []
    sides = [("beam", sys.executable, base), ("Ray", args.ray_python, ray_env)]
    if args.before:
        sides.insert(1, ("before", sys.executable, _tree_env(base, args.before)))
    got = {name: [] for name, _, _ in sides}
    for r in range(args.rounds):
        for name, python, env in sides:
            print(f"round {r + 1}: {name} ...", file=sys.stderr, flush=True)
            got[name].append(side_in_subprocess(__file__, python, env, extra))
    before = f" {'before':>10} {'before/Ray':>10}" if args.before else ""
    print(f"{'workload':22} {'beam':>10} {'Ray 2.43':>10} {'beam/Ray':>9}{before}")
    for label, _ in SIZES:
        for kind in KINDS:
            w = f"{kind} {label}"
            b, r = (statistics.median(s[w] for s in got[name]) for name in ("beam", "Ray"))
            line = f"{w:22} {fmt(b):>10} {fmt(r):>10} {b / r:>9.2f}"
            if args.before:
                o = statistics.median(s[w] for s in got["before"])
                line += f" {fmt(o):>10} {o / r:>10.2f}"
            print(line)
    for name in ("beam", "before") if args.before else ("beam",):
        rss = [(s["rss_before"], s["rss_after"]) for s in got[name]]
        print(f"beamd RSS (kB) before/after each round, {name}:", rss)
    if not args.no_cgraph:
        cgraph_table(args)


def _tree_env(base, tree):
    """base with another checkout's beam: its build (tree/build) when it
    has one, else only its python/ in place of this one's (this build's
    beamd and _beam)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tree = os.path.abspath(tree)
    env = dict(base)
    if os.path.exists(os.path.join(tree, "build", "beamd")):
        for k in ("PYTHONPATH", "BEAM_BEAMD", "BEAM_BEAMCTL"):
            if k in env:
                env[k] = env[k].replace(here + "/", tree + "/")
        return env
    mine, theirs = os.path.join(here, "python"), os.path.join(tree, "python")
    env["PYTHONPATH"] = ":".join(theirs if p == mine else p for p in env.get("PYTHONPATH", "").split(":"))
    return env


# -- compiled-graph edges -----------------------------------------------------


class Edge:
    """The graph's actors: ``make`` returns an array it keeps (made once a
    size), ``size`` answers the size of what it got."""

    def __init__(self):
        self.kept = {}

    def make(self, n):
        import numpy

        if n not in self.kept:
            self.kept[n] = numpy.ones(n, dtype=numpy.uint8)
        return self.kept[n]

    def size(self, x):
        return int(x[-1]) + x.nbytes


def cgraph_side(quick):
    """Per-step seconds of execute+get of a.make -> b.size, per size; or
    {"error": why} where the side's compiled graphs fail."""
    import ray

    init_kw = {"num_cpus": 2, "num_gpus": 0}
    if getattr(ray, "__commit__", "") != "beam":
        init_kw.update(include_dashboard=False, log_to_driver=False)
    ray.init(**init_kw)
    out = {}
    try:
        from ray.dag import InputNode

        cls = ray.remote(num_cpus=0)(Edge)
        a, b = cls.remote(), cls.remote()
        with InputNode() as inp:
            dag = b.size.bind(a.make.bind(inp))
        cd = dag.experimental_compile()
        for label, n in SIZES:
            reps = (3 if quick else 15) if n >= 32 << 20 else (20 if quick else 200)
            for _ in range(3):
                assert ray.get(cd.execute(n)) == n + 1
            out[f"cgraph edge {label}"] = timed(lambda: ray.get(cd.execute(n)), reps)
        for actor in (a, b):  # first: Ray 2.43's teardown waits forever here for actors it can't stop
            ray.kill(actor)
        cd.teardown()
    except Exception as e:
        out = {"error": f"{type(e).__name__}: {e}"[:500]}
    ray.shutdown()
    return out


def cgraph_table(args):
    """beam, beam over the socket only, Ray 2.43: alternated, medians."""
    base, ray_env = side_envs()
    sock = dict(base, BEAM_CGRAPH_SHM_MIN=str(1 << 62))
    extra = ["--quick"] if args.quick else []
    sides = (("beam", sys.executable, base), ("beam socket", sys.executable, sock), ("Ray", args.ray_python, ray_env))
    got = {name: [] for name, _, _ in sides}
    for r in range(args.rounds):
        for name, python, env in sides:
            print(f"round {r + 1}: cgraph {name} ...", file=sys.stderr, flush=True)
            got[name].append(_cgraph_run(python, env, extra))
    errors = {name: runs[0]["error"] for name, runs in got.items() if "error" in runs[0]}
    for name, why in errors.items():
        print(f"{name}: compiled graphs failed here ({why}); its column is n/a")
    print(f"{'workload':22} {'beam':>10} {'beam sock':>10} {'Ray 2.43':>10} {'beam/Ray':>9} {'beam/sock':>9}")
    for label, _ in SIZES:
        w = f"cgraph edge {label}"
        b, s_, r = (None if name in errors else statistics.median(x[w] for x in got[name]) for name, _, _ in sides)
        ratio_r = f"{b / r:9.2f}" if b and r else f"{'n/a':>9}"
        ratio_s = f"{b / s_:9.2f}" if b and s_ else f"{'n/a':>9}"
        print(f"{w:22} {fmt(b):>10} {fmt(s_):>10} {fmt(r):>10} {ratio_r} {ratio_s}")


def _cgraph_run(python, env, extra):
    try:
        return side_in_subprocess(__file__, python, env, ["--side-kind", "cgraph", *extra])
    except RuntimeError as e:
        return {"error": str(e)[-300:]}


# -- CUDA tensors ---------------------------------------------------------------


GPU_BYTES = 64 << 20


class GpuEdge:
    def make(self, step):
        import torch

        nbytes, seed = step
        return torch.full((nbytes // 4,), float(seed), device="cuda")

    def take(self, t):
        return (t.is_cuda, t.numel() * t.element_size(), float(t[0]))


def _bw(seconds, nbytes=GPU_BYTES):
    return f"{nbytes / seconds / 1e9:6.2f} GB/s ({fmt(seconds)})"


def gpu_side(quick):
    """beam's CUDA-tensor figures and torch's own copies, 64 MiB; or
    {"skip": why}."""
    try:
        import torch
    except ImportError:
        return {"skip": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"skip": "no CUDA device (torch.cuda.is_available() is False)"}
    import ray
    from ray._private import tensors

    reps = 5 if quick else 20
    out = {}
    src = torch.ones(GPU_BYTES // 4, device="cuda")
    pinned = torch.empty(GPU_BYTES // 4, pin_memory=True)
    pageable = torch.empty(GPU_BYTES // 4)

    def copy(dst):
        dst.copy_(src)
        torch.cuda.synchronize()

    out["torch d2h pageable"] = timed(lambda: copy(pageable), reps)
    out["torch d2h pinned"] = timed(lambda: copy(pinned), reps)
    stage = tensors.Stage()

    def staged():
        stage.reset()
        stage.to_host(src)

    out["beam d2h (Stage)"] = timed(staged, reps)
    ray.init(num_cpus=2, num_gpus=1)
    from ray.dag import InputNode

    cls = ray.remote(num_cpus=0, num_gpus=0.5)(GpuEdge)
    a, b = cls.remote(), cls.remote()
    with InputNode() as inp:
        dag = b.take.bind(a.make.bind(inp))
    cd = dag.experimental_compile()
    assert ray.get(cd.execute((GPU_BYTES, 3))) == (True, GPU_BYTES, 3.0)
    out["beam cgraph edge"] = timed(lambda: ray.get(cd.execute((GPU_BYTES, 1))), reps)
    cd.teardown()
    t = ray.get(a.make.remote((GPU_BYTES, 2)))
    assert t.is_cuda and float(t[0]) == 2.0
    out["beam ray.get (made in an actor)"] = timed(lambda: ray.get(a.make.remote((GPU_BYTES, 2))), reps)
    ray.shutdown()
    return out


def gpu_table(args):
    base, _ = side_envs()
    extra = ["--quick"] if args.quick else []
    got = side_in_subprocess(__file__, sys.executable, base, ["--side-kind", "gpu", *extra])
    if "skip" in got:
        print(f"--gpu: skipped: {got['skip']}")
        return
    print(f"CUDA tensors, {GPU_BYTES >> 20} MiB (beam, this run):")
    for w, sec in got.items():
        print(f"  {w:34} {_bw(sec)}")


if __name__ == "__main__":
    main()
