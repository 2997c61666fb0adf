# SPDX-License-Identifier: Apache-2.0
"""One vLLM run, as a user writes it: LLM(...) on the kit's tiny model,
greedy generate, the tokens and timings printed as one JSON line (the last
line of stdout). Usage:

    python generate.py MODEL_DIR --backend ray|mp [--tp 2] [--pp 1]
        [--prompts 12] [--tokens 64] [--rounds 2] [--kill-worker-after S]

`--rounds N` generates N times with the same LLM (the first round warms up;
throughput is the last round's). With ray, the driver connects to the
running cluster (`ray start` first) as vLLM does. With VLLM_KIT_ROUND_MARK
set, each round's start is appended to the file it names (mark_round)."""

import argparse
import json
import os
import sys
import time

PROMPTS = [
    "The river runs past the city and",
    "One two three four",
    "A worker node holds the tensor",
    "In the morning light the garden",
    "The engine splits the batch across",
    "Small stone windows of the old",
    "Music from the mountain was",
    "Ten hundred people in a",
    "The placement group puts each actor",
    "Evening water and the last",
    "A story of the first model",
    "The daemon answers the socket with",
]


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--backend", choices=("ray", "mp"), required=True)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--kill-worker-after",
        type=float,
        default=None,
        help="SIGKILL one RayWorkerProc this many seconds into the last round",
    )
    return p.parse_args(argv)


def prompts(n):
    return [PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else f" ({i})") for i in range(n)]


def main(argv=None):
    args = parse_args(argv)
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(
        model=args.model,
        tensor_parallel_size=args.tp,
        pipeline_parallel_size=args.pp,
        distributed_executor_backend=args.backend,
        dtype="bfloat16",
        max_model_len=512,
        enforce_eager=True,
        seed=0,
        gpu_memory_utilization=0.5,
    )
    startup = time.perf_counter() - t0
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    ps = prompts(args.prompts)
    rounds = []
    outs = None
    cpu = {}
    for r in range(args.rounds):
        last = r == args.rounds - 1
        if args.kill_worker_after is not None and last:
            kill_a_worker_later(args.kill_worker_after)
        before = cpu_by_process() if last else None
        mark_round(r)
        t = time.perf_counter()
        outs = llm.generate(ps, params, use_tqdm=False)
        dt = time.perf_counter() - t
        n = sum(len(o.outputs[0].token_ids) for o in outs)
        rounds.append({"end": time.time(), "seconds": dt, "tokens": n, "tok_per_s": n / dt})
        if last:
            cpu = cpu_per_token(before, cpu_by_process(), n)
    result = {
        "backend": args.backend,
        "tp": args.tp,
        "pp": args.pp,
        "startup_s": startup,
        "rounds": rounds,
        "cpu_ms_per_token": cpu,
        "prompts": ps,
        "token_ids": [list(o.outputs[0].token_ids) for o in outs],
        "text": [o.outputs[0].text for o in outs],
    }
    del llm
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def mark_round(r):
    """Appends "ROUND START_TIME" to the file VLLM_KIT_ROUND_MARK names, if
    set: how a bench watching from outside knows when a round begins."""
    path = os.environ.get("VLLM_KIT_ROUND_MARK")
    if path:
        with open(path, "a") as f:
            f.write(f"{r} {time.time()}\n")


def _run_group():
    """The kit run's cgroup (kit.Run sets VLLM_KIT_CGROUP), or None."""
    path = os.environ.get("VLLM_KIT_CGROUP")
    if not path:
        return None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import vllm_kit_procs

    return vllm_kit_procs.RunGroup.at(path), vllm_kit_procs


def cpu_by_process():
    """{pid: (title, CPU seconds)} of every process of the run, this one too."""
    found = _run_group()
    if not found:
        return {}
    group, kp = found
    return {p: (kp.cmdline(p)[:60], kp.cpu_seconds(p)) for p in group.pids()}


def cpu_per_token(before, after, tokens):
    """CPU milliseconds per generated token of each process alive across the round."""
    out = {}
    for pid, (title, end) in sorted(after.items()):
        if pid in before and tokens:
            out[f"{pid} {title}"] = round(1000.0 * (end - before[pid][1]) / tokens, 3)
    return out


def kill_a_worker_later(delay):
    """SIGKILLs one of the run's vLLM workers (RayWorkerProc) after delay."""
    import threading

    def kill():
        time.sleep(delay)
        group, kp = _run_group()
        pids = [p for p in group.pids() if kp.is_vllm_worker(p)]
        if not pids:
            print("no vLLM worker found to kill", file=sys.stderr, flush=True)
            os._exit(3)
        os.kill(pids[0], 9)
        print(f"killed worker {pids[0]} at {time.time():.3f}", file=sys.stderr, flush=True)

    threading.Thread(target=kill, daemon=True).start()


if __name__ == "__main__":
    main()
