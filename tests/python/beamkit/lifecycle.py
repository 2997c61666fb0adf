# SPDX-License-Identifier: Apache-2.0
"""The randomized lifecycle run: several driver processes against one real
beamd, every step chosen from a seeded random generator.

Each driver (beamkit/lifecycle_driver.py) runs the public ``ray`` API on commands
the run sends it over a pipe: create actors with and without GPUs (in a
placement group or not, some that can never fit, some whose constructor
raises), call them (values, raising methods, a method that exits the
worker, one that starts a child process), put/get/wait, release (``del``)
handles and refs, ``ray.kill``, create and remove placement groups (some
that cannot fit). The run also SIGKILLs workers and drivers, and drivers
exit (with and without ``ray.shutdown``). Several drivers act in the same
step.

What is checked:

- after every step: beamd is alive and ``beamctl status --json`` answers;
  no sanitizer report in its log or in a driver's; the resources are sane
  (0 <= available <= total, no GPU shared past its capacity by the actors
  holding it); nothing pending that could fit (a PENDING group or a
  PENDING_CREATION actor whose demand fits in what is available now: beamd
  schedules whenever resources come back, so every snapshot must show none).
- every reply against the model: a put's value comes back intact, a call on
  an actor known dead fails with ActorDiedError, a live one's answer is its
  value (or a timeout), a raising method raises its cause, a group that can
  never fit never becomes ready.
- at quiescence (every ``quiesce_every`` steps and at the end, after the
  drivers released everything, or exited, or were killed): every CPU/GPU
  available again, every actor DEAD with no worker, no group but REMOVED
  ones, the object table empty, no worker connection, and no process
  carrying the daemon's socket in its environment but the drivers (no
  worker, no actor's child left). With no driver left, the actor table is
  empty too.

The generator decides each step from the seed and the model only (never
from an outcome), so a seed replays the same commands; outcomes depend on
timing, so the model accepts every outcome Ray allows at that point.
"""

import json
import os
import random
import select
import signal
import subprocess
import sys

from .daemon import Beamd
from .procs import beam_processes, kill_all, wait_until
from .suite import describe

# the driver runs as a module of the kit (python -m): its folder is not put
# on the path, where the kit's modules (venv, client, ...) would shadow others
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = "beamkit.lifecycle_driver"
SANITIZER_MARKS = (
    "ERROR: AddressSanitizer",
    "runtime error:",
    "ERROR: LeakSanitizer",
    "double free or corruption",
    "free(): invalid",
    "malloc(): ",
)
NUM_GPUS, NUM_CPUS = 4, 8
EPS = 1e-9


class LifecycleFailure(AssertionError):
    pass


class ActorM:
    def __init__(self, name, gpus, cpus, pg, bundle, fail_init, owner, step, actor_name=None):
        self.name, self.gpus, self.cpus, self.pg, self.bundle = name, gpus, cpus, pg, bundle
        self.fail_init = fail_init
        # certain: every call made from now on fails (a constructor that
        # raises does so once the actor is placed: never, if it cannot fit)
        self.dead = fail_init and gpus <= NUM_GPUS
        self.hex = None
        self.owner = owner  # (slot index, generation) of the driver that made it
        self.step = step
        self.actor_name = actor_name


class RefM:
    def __init__(self, name, kind, expect):
        self.name, self.kind, self.expect = name, kind, expect


class PgM:
    def __init__(self, name, bundles, strategy):
        self.name, self.bundles, self.strategy = name, bundles, strategy
        self.removed = False
        self.hex = None

    def fits_empty_node(self):
        return fits_bundles(self.bundles, self.strategy, NUM_CPUS, [1.0] * NUM_GPUS)


def fits_bundles(bundles, strategy, cpus, gpu_avail):
    """Whether the bundles fit a single node with cpus and per-device GPU
    availability gpu_avail (bundles ask for whole GPUs)."""
    if strategy == "STRICT_SPREAD" and len(bundles) > 1:
        return False
    need_cpu = sum(b.get("CPU", 0) for b in bundles)
    need_gpu = sum(b.get("GPU", 0) for b in bundles)
    free = sum(1 for a in gpu_avail if a >= 1 - EPS)
    return need_cpu <= cpus + EPS and need_gpu <= free


def fits_actor(gpus, cpus, avail_cpus, gpu_avail):
    if cpus > avail_cpus + EPS:
        return False
    if gpus == 0:
        return True
    if gpus < 1:
        return any(a >= gpus - EPS for a in gpu_avail)
    return sum(1 for a in gpu_avail if a >= 1 - EPS) >= gpus


class Slot:
    """One driver process and what the model says it holds."""

    def __init__(self, run, index):
        self.run, self.index = run, index
        self.proc = None
        self.pid = None
        self.generation = 0
        self.err_path = None
        self.reset_model()

    def reset_model(self):
        self.actors, self.refs, self.pgs = {}, {}, {}
        self.weak = set()  # aliases got by name: weak, as in Ray (they keep nothing alive)

    def start(self):
        self.generation += 1
        self.err_path = os.path.join(self.run.beamd.dir, f"driver{self.index}.{self.generation}.err")
        env = dict(os.environ, BEAM_SOCKET=self.run.beamd.socket, PYTHONUNBUFFERED="1")
        env.pop("RAY_ADDRESS", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, env.get("PYTHONPATH")) if p)
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", DRIVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                text=True,
                bufsize=1,
            )
        self.pid = self.recv(120)["ok"]["pid"]
        self.reset_model()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send(self, cmd, quiet=False):
        if not quiet:
            self.run.note(f"d{self.index} > {json.dumps(cmd, sort_keys=True)}")
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.run.fail(f"driver {self.index} is gone (pipe closed)", driver=self)

    def recv(self, timeout=None, quiet=False):
        timeout = timeout or self.run.reply_timeout
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.run.fail(f"driver {self.index} did not answer in {timeout} s", driver=self)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            self.run.fail(f"driver {self.index} died (exit {self.proc.returncode})", driver=self)
        r = json.loads(line)
        if not quiet:
            self.run.note(f"d{self.index} < {line.strip()[:300]}")
        return r

    def stderr_tail(self, n=3000):
        try:
            with open(self.err_path, "rb") as f:
                return f.read().decode(errors="replace")[-n:]
        except (OSError, TypeError):
            return ""

    def owner_key(self):
        return (self.index, self.generation)

    def kill(self):
        for a in self.run.owned.pop(self.owner_key(), []):
            a.dead = True  # an actor dies with its owner, whoever else holds it
        if self.alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(10)
            self.run.check_driver_log(self)  # its last words, before a new driver takes the slot
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        self.proc = None
        self.reset_model()

    def close(self):
        if self.alive():
            try:
                self.send({"op": "exit", "how": "shutdown"})
                self.recv(30)
            except LifecycleFailure:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


class Run:
    def __init__(self, seed, steps, drivers=3, quiesce_every=40, log=None, reply_timeout=60):
        self.seed, self.steps, self.ndrivers = seed, steps, drivers
        self.quiesce_every = quiesce_every
        self.rng = random.Random(seed)
        self.reply_timeout = reply_timeout
        self.out = log
        self.trail = []
        self.counter = 0
        self.step_no = 0
        self.beamd = None
        self.slots = []
        self.demand = {}  # actor hex -> (gpus, cpus, in a group)
        self.owned = {}  # (slot index, generation) -> the ActorMs that driver made
        self.stats = {}
        self.log_pos = 0

    # --- bookkeeping ---

    def note(self, line):
        line = f"[{self.step_no}] {line}"
        self.trail.append(line)
        if len(self.trail) > 400:
            del self.trail[:100]
        if self.out:
            self.out(line)

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def count(self, what):
        self.stats[what] = self.stats.get(what, 0) + 1

    def repro(self):
        return (
            f"BEAM_LIFECYCLE_SEED={self.seed} BEAM_LIFECYCLE_STEPS={self.steps} "
            f"$BEAM_PYTHON scripts/lifecycle_random.py --seed {self.seed} --steps {self.steps} "
            f"--drivers {self.ndrivers}"
        )

    def fail(self, why, driver=None):
        if self.beamd is not None and self.beamd.proc.poll() is not None:
            why += f" (beamd died: exit {self.beamd.proc.returncode})"
        parts = [
            f"lifecycle seed={self.seed} step={self.step_no}: {why}",
            f"reproduce: {self.repro()}",
            "last steps:",
            *self.trail[-60:],
        ]
        if driver is not None:
            parts += [f"driver {driver.index} stderr:", driver.stderr_tail()]
        if self.beamd is not None:
            parts += [f"beamd log ({self.beamd.log_path}, kept with the drivers' stderr):", self.beamd_log_tail()]
        raise LifecycleFailure("\n".join(parts))

    def beamd_log_tail(self):
        text = self.beamd.read_log()
        for mark in SANITIZER_MARKS:
            i = text.find(mark)
            if i >= 0:
                return text[max(0, i - 2000) : i + 8000]
        return text[-4000:]

    # --- the run ---

    def __enter__(self):
        self.beamd = Beamd(num_gpus=NUM_GPUS, num_cpus=NUM_CPUS)
        self.slots = [Slot(self, i) for i in range(self.ndrivers)]
        try:
            for s in self.slots:
                s.start()
        except BaseException as e:
            self.__exit__(type(e), e, None)
            raise
        return self

    def __exit__(self, *exc):
        late = None
        for s in self.slots:
            try:
                s.close()
            except LifecycleFailure as e:
                late = late or e
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait(10)
        rc = self.beamd.stop()
        left = beam_processes(self.beamd.socket)
        kill_all(left)
        if exc[0] is None:
            if late is not None:
                raise late
            if rc != 0:
                self.fail(f"beamd exited with {rc}")
            if left:
                self.fail(f"processes left after beamd stopped: {left}")
        return False

    def cleanup(self):
        import shutil

        shutil.rmtree(self.beamd.dir, ignore_errors=True)

    def go(self):
        for self.step_no in range(1, self.steps + 1):
            self.step()
            self.check_snapshot()
            if self.step_no % self.quiesce_every == 0:
                self.quiesce(final=False)
        self.step_no += 1
        self.quiesce(final=True)
        return self.stats

    # --- one step ---

    def step(self):
        rng = self.rng
        r = rng.random()
        if r < 0.025:
            return self.driver_death(rng.choice(self.slots))
        if r < 0.04:
            return self.worker_kill(rng.choice(self.slots))
        k = rng.choices([1, 2, len(self.slots)], weights=[60, 25, 15])[0]
        chosen = rng.sample(self.slots, k)
        sent = []
        for s in chosen:
            if not s.alive():
                s.start()
            cmd, check = self.command(s)
            s.send(cmd)
            if cmd["op"] == "lookup":
                # answered before the commands decided after it go out: one of
                # those may kill or release the actor it looks up
                r = s.recv()
                self.count(cmd["op"])
                check(r)
                continue
            sent.append((s, cmd, check))
        for s, cmd, check in sent:
            r = s.recv()
            self.count(cmd["op"])
            check(r)

    def command(self, s):
        """A command for slot s and the check for its reply (both from the
        model; the model is updated here, as the command is decided)."""
        rng = self.rng
        ops = ["create", "put", "pg_create"]
        if self.callable(s):
            ops += ["call"] * 4
        if s.actors:
            ops += ["del_actor"] * 2 + ["kill"]
        if s.refs:
            ops += ["get"] * 3 + ["wait", "del_ref"]
        if any(not p.removed for p in s.pgs.values()):
            ops += ["pg_remove", "pg_wait", "create_in_pg"]
        if self.lookup_candidates(s):
            ops += ["lookup"]
        op = rng.choice(ops)
        return getattr(self, "cmd_" + op)(s)

    def lookup_candidates(self, s):
        """Named actors another live driver holds a handle to (not one got
        by name: that one is weak), made before this step, not known dead:
        ray.get_actor must find them."""
        out = {}
        for o in self.slots:
            if o is s or not o.alive():
                continue
            for alias, a in o.actors.items():
                if alias not in o.weak and a.actor_name and not a.dead and a.step < self.step_no and a.hex:
                    out[a.actor_name] = a
        return [out[k] for k in sorted(out)]

    def cmd_lookup(self, s):
        a = self.rng.choice(self.lookup_candidates(s))
        alias = self.fresh("a")
        s.actors[alias] = a
        s.weak.add(alias)  # the actor may die under it (calls allow ActorDiedError)

        def check(r):
            if "error" in r or r["ok"] != a.hex:
                self.fail(f"ray.get_actor({a.actor_name!r}) gave {r}, expected {a.hex}")

        return {"op": "lookup", "actor_name": a.actor_name, "as": alias}, check

    # actors

    def cmd_create(self, s, pg=None):
        rng = self.rng
        name = self.fresh("a")
        bundle = -1
        if pg is None:
            gpus = rng.choices([0, 0.5, 1, 2, 5], weights=[30, 10, 35, 15, 5])[0]
            cpus = rng.choice([0, 0.5, 1, 2])
        else:
            b = rng.randrange(len(pg.bundles))
            room = pg.bundles[b]
            gpus = rng.choice([g for g in (0, 0.5, 1, 2) if g <= room.get("GPU", 0)])
            cpus = rng.choice([c for c in (0, 0.5, 1, 2) if c <= room.get("CPU", 0)])
            bundle = b if rng.random() < 0.7 else -1
        fail_init = rng.random() < 0.05
        actor_name = f"named-{name}" if rng.random() < 0.2 else None
        a = ActorM(
            name, gpus, cpus, pg.name if pg else None, bundle, fail_init, s.owner_key(), self.step_no, actor_name
        )
        self.owned.setdefault(s.owner_key(), []).append(a)
        if pg is not None and pg.removed:
            a.dead = True
        s.actors[name] = a
        cmd = {"op": "create", "name": name, "num_gpus": gpus, "num_cpus": cpus, "fail_init": fail_init}
        if pg is not None:
            cmd.update(pg=pg.name, bundle=bundle)
        if actor_name:
            cmd["actor_name"] = actor_name

        def check(r):
            if "error" in r:
                self.fail(f"create raised {r}")
            a.hex = r["ok"]
            self.demand[a.hex] = (gpus, cpus, pg is not None)

        return cmd, check

    def cmd_create_in_pg(self, s):
        live = [p for p in s.pgs.values() if not p.removed]
        return self.cmd_create(s, pg=self.rng.choice(live))

    def callable(self, s):
        """The actors a call may go to: not those that never fit and still
        live. Such a call waits for ever, and it keeps its actor pending
        after every handle is gone (as in Ray, which cancels only a pending
        actor with no call submitted), so nothing would come back to empty."""
        return sorted(k for k, a in s.actors.items() if a.gpus <= NUM_GPUS or a.dead)

    def cmd_call(self, s):
        rng = self.rng
        key = rng.choice(self.callable(s))
        a = s.actors[key]
        method = rng.choices(
            ["ping", "echo", "echo_ref", "echo_handle", "sleep", "fail", "pid", "child", "gpus", "nest", "die"],
            weights=[30, 10, 10, 6, 8, 5, 8, 5, 6, 6, 3],
        )[0]
        args = []
        puts = [r for r in s.refs.values() if r.kind == "put"]
        if method == "echo_ref" and not puts:
            method = "echo"
        # A call's arguments keep the handles in them alive until it runs, as
        # in Ray: a call that can never run (on an actor that never fits)
        # carrying its own actor's handle, or another such actor's, is a
        # reference cycle that lasts as long as the driver. So those carry
        # only handles of actors that fit.
        carriable = sorted(k for k, o in s.actors.items() if o.gpus <= NUM_GPUS and o is not a or a.gpus <= NUM_GPUS)
        if method == "echo_handle" and not carriable:
            method = "echo"
        if method == "echo":
            v = rng.choice([1, "x", [1, 2], None, "y" * 1000])
            args, value = [v], ("value", v)
        elif method == "echo_ref":
            p = rng.choice(puts)
            args, value = [{"ref": p.name}], p.expect
            method = "echo"
        elif method == "echo_handle":
            okey = rng.choice(carriable)
            other = s.actors[okey]
            args, value = [{"actor": okey}], ("handle", other)
            method = "echo"
        elif method == "nest":
            args, value = [rng.choice([0, 1, 1, 5]), rng.random() < 0.5], ("str",)
        elif method == "sleep":
            t = rng.choice([0.01, 0.1, 0.3])
            args, value = [t], ("value", t)
        elif method == "ping":
            value = ("value", "pong")
        elif method == "fail":
            value = ("raises", "RayTaskError(ValueError)")
        elif method in ("pid", "child"):
            value = ("int",)
        elif method == "gpus":
            value = ("len", 0 if a.gpus == 0 else max(1, int(a.gpus)))
        else:  # die
            value = ("died",)
        name = self.fresh("r")
        expect = ("died",) if a.dead else value
        if method == "die":
            a.dead = True
        s.refs[name] = RefM(name, "call", expect)
        return {"op": "call", "actor": key, "method": method, "args": args, "ref": name}, self.check_ok

    def cmd_kill(self, s):
        key = self.rng.choice(sorted(s.actors))
        a = s.actors[key]
        a.dead = True
        return {"op": "kill", "actor": key}, self.check_ok

    def cmd_del_actor(self, s):
        names = self.rng.sample(sorted(s.actors), min(len(s.actors), self.rng.choice([1, 1, 2])))
        for n in names:
            del s.actors[n]
            s.weak.discard(n)
        return {"op": "del", "names": names}, self.check_ok

    # objects

    def cmd_put(self, s):
        size = self.rng.choice([0, 10, 1000, 100_000, 1_000_000])
        name = self.fresh("p")
        s.refs[name] = RefM(name, "put", ("value", {"name": name, "size": size, "intact": True}))
        return {"op": "put", "ref": name, "size": size}, self.check_ok

    def cmd_del_ref(self, s):
        names = self.rng.sample(sorted(s.refs), min(len(s.refs), self.rng.choice([1, 2, 3])))
        for n in names:
            del s.refs[n]
        return {"op": "del", "names": names}, self.check_ok

    def cmd_get(self, s):
        rng = self.rng
        names = rng.sample(sorted(s.refs), min(len(s.refs), rng.choice([1, 1, 1, 2, 3])))
        refs = [s.refs[n] for n in names]
        timeout = rng.choice([0, 0.1, 0.1, 1.0])

        def check(r):
            if "error" in r:
                self.fail(f"get failed in the harness: {r}")
            res = r["ok"]
            if "values" in res:
                for ref, v in zip(refs, res["values"]):
                    self.check_value(ref, v)
                return
            raised = res["raised"]
            allowed = {"GetTimeoutError"}
            for ref in refs:
                if ref.expect[0] == "died":
                    allowed.add("ActorDiedError")
                elif ref.expect[0] == "raises":
                    allowed.add(ref.expect[1])
                if ref.kind == "call":
                    allowed.add("ActorDiedError")  # the actor may have died meanwhile
            if raised not in allowed:
                self.fail(f"get of {names} raised {raised} ({res.get('message')}); allowed: {sorted(allowed)}")
            if raised == "GetTimeoutError" and all(ref.kind == "put" for ref in refs):
                self.fail(f"get of puts {names} timed out")
            self.count("get:" + raised)

        return {"op": "get", "refs": names, "timeout": timeout}, check

    def check_value(self, ref, v):
        kind = ref.expect[0]
        self.count("value")
        if kind == "value" and v != ref.expect[1]:
            self.fail(f"{ref.name}: got {v!r}, expected {ref.expect[1]!r}")
        if kind == "int" and not isinstance(v, int):
            self.fail(f"{ref.name}: got {v!r}, expected a pid")
        if kind == "handle" and v != {"handle": ref.expect[1].hex}:
            self.fail(f"{ref.name}: got {v!r}, expected the handle of {ref.expect[1].hex}")
        if kind == "str" and not isinstance(v, str):
            self.fail(f"{ref.name}: got {v!r}, expected an actor id")
        if kind == "len" and (not isinstance(v, list) or len(v) != ref.expect[1]):
            self.fail(f"{ref.name}: got GPU ids {v!r}, expected {ref.expect[1]} of them")
        if kind in ("died", "raises"):
            self.fail(f"{ref.name}: got the value {v!r}, expected {ref.expect}")

    def cmd_wait(self, s):
        rng = self.rng
        names = rng.sample(sorted(s.refs), min(len(s.refs), rng.choice([1, 2, 4])))
        num = rng.randint(1, len(names))
        puts = sum(1 for n in names if s.refs[n].kind == "put")

        def check(r):
            if "error" in r:
                self.fail(f"wait raised {r}")
            ready, rest = r["ok"]["ready"], r["ok"]["rest"]
            if sorted(ready + rest) != sorted(names) or len(ready) > num:
                self.fail(f"wait({names}, num_returns={num}) gave {ready}, {rest}")
            if [n for n in names if n in ready] != ready or [n for n in names if n in rest] != rest:
                self.fail(f"wait({names}) did not keep the input order: {ready}, {rest}")
            if len(ready) < min(num, puts):
                self.fail(f"wait({names}, num_returns={num}): only {ready} ready, with {puts} puts among them")

        return {"op": "wait", "refs": names, "num_returns": num, "timeout": rng.choice([0, 0.1])}, check

    # placement groups

    def cmd_pg_create(self, s):
        rng = self.rng
        bundles = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            b = {}
            cpu, gpu = rng.choice([0, 0.5, 1, 2]), rng.choice([0, 1, 1, 2])
            if cpu:
                b["CPU"] = cpu
            if gpu:
                b["GPU"] = gpu
            bundles.append(b or {"CPU": 1})
        strategy = rng.choice(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"])
        name = self.fresh("g")
        pg = PgM(name, bundles, strategy)
        s.pgs[name] = pg

        def check(r):
            if "error" in r:
                self.fail(f"placement_group raised {r}")
            pg.hex = r["ok"]

        return {"op": "pg_create", "name": name, "bundles": bundles, "strategy": strategy}, check

    def cmd_pg_remove(self, s):
        pg = self.rng.choice([p for p in s.pgs.values() if not p.removed])
        pg.removed = True
        for a in self.owned.get(s.owner_key(), []):  # held by this driver or not
            if a.pg == pg.name:
                a.dead = True
        return {"op": "pg_remove", "name": pg.name}, self.check_ok

    def cmd_pg_wait(self, s):
        pg = self.rng.choice([p for p in s.pgs.values() if not p.removed])

        def check(r):
            if "error" in r:
                self.fail(f"pg.wait raised {r}")
            if r["ok"] and not pg.fits_empty_node():
                self.fail(f"group {pg.name} {pg.strategy} {pg.bundles} became ready on a node it cannot fit")

        return {"op": "pg_wait", "name": pg.name, "timeout": self.rng.choice([0, 0.1, 0.5])}, check

    def check_ok(self, r):
        if "error" in r:
            self.fail(f"unexpected error: {r}")

    # deaths

    def driver_death(self, s):
        """SIGKILL (sometimes in the middle of a call), or an exit with or
        without ray.shutdown(); the slot starts a new driver next time."""
        if not s.alive():
            s.start()
        how = self.rng.choices(["sigkill", "sigkill_mid_call", "shutdown", "exit"], weights=[3, 3, 2, 2])[0]
        self.note(f"d{s.index} dies: {how}")
        self.count("driver_" + how)
        if how.startswith("sigkill"):
            if how == "sigkill_mid_call" and self.callable(s):
                cmd, _ = self.cmd_call(s)
                s.send(cmd)
            s.kill()
        else:
            s.send({"op": "exit", "how": how})
            s.recv()
            s.proc.wait(30)
            if s.proc.returncode != 0:
                self.fail(f"driver {s.index} exited with {s.proc.returncode}", driver=s)
            s.kill()

    def worker_kill(self, s):
        """SIGKILLs the worker of one of the slot's actors (if it answers in
        time); every later call on it fails."""
        if not s.alive():
            s.start()
        if not self.callable(s):
            return
        key = self.rng.choice(self.callable(s))
        a = s.actors[key]
        name = self.fresh("r")
        s.refs[name] = RefM(name, "call", ("died",) if a.dead else ("int",))
        s.send({"op": "call", "actor": key, "method": "pid", "args": [], "ref": name})
        self.check_ok(s.recv())
        s.send({"op": "get", "refs": [name], "timeout": 1.0})
        r = s.recv()
        values = r.get("ok", {}).get("values")
        a.dead = True  # decided from the model, whatever the outcome
        if values and isinstance(values[0], int):
            self.note(f"SIGKILL worker {values[0]} of {key}")
            self.count("worker_sigkill")
            try:
                os.kill(values[0], signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            # not running yet: make it die through the API instead
            s.send({"op": "kill", "actor": key})
            self.check_ok(s.recv())

    # --- invariants ---

    def check_logs(self):
        text = self.beamd.read_log()
        for mark in SANITIZER_MARKS:
            if mark in text[self.log_pos :]:
                self.fail(f"beamd's log has {mark!r}")
        for s in self.slots:
            self.check_driver_log(s)

    def check_driver_log(self, s):
        tail = s.stderr_tail(200000)
        for mark in SANITIZER_MARKS:
            if mark in tail:
                self.fail(f"driver {s.index}'s stderr (or a worker's) has {mark!r}", driver=s)

    def status(self):
        if self.beamd.proc.poll() is not None:
            self.fail(f"beamd died (exit {self.beamd.proc.returncode})")
        try:
            return self.beamd.status()
        except Exception as e:  # noqa: BLE001 - reported with the run
            try:
                self.beamd.proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
            rc = self.beamd.proc.poll()
            self.fail(f"beamctl status failed: {e!r}" + ("" if rc is None else f"; beamd died (exit {rc})"))

    def check_snapshot(self):
        st = self.status()
        self.check_logs()
        tot, av = st["resources_total"], st["resources_available"]
        for k in ("CPU", "GPU"):
            if not (-EPS <= av.get(k, 0) <= tot.get(k, 0) + EPS):
                self.fail(f"{k} available {av.get(k)} is outside 0..{tot.get(k)}")
        gpu_avail = [g["available"] for g in st["gpus"]]
        if any(not (-EPS <= g <= 1 + EPS) for g in gpu_avail):
            self.fail(f"a GPU's availability is outside 0..1: {st['gpus']}")
        # no device held past its capacity by the actors that hold it
        share = {}
        for a in st["actors"]:
            if a["state"] == "DEAD" and not a["pid"]:
                continue
            g = self.demand.get(a["actor_id"], (None,))[0]
            for dev in a["gpu_ids"]:
                share[dev] = share.get(dev, 0) + (min(g, 1) if g is not None else 1)
        for dev, used in share.items():
            if used > 1 + EPS:
                self.fail(f"GPU {dev} is held by actors asking for {used} of it: {st['actors']}")
        # nothing pending that fits now
        for g in st["placement_groups"]:
            if g["state"] == "PENDING" and fits_bundles(g["bundles"], g["strategy"], av.get("CPU", 0), gpu_avail):
                self.fail(
                    f"group {g['placement_group_id']} {g['strategy']} {g['bundles']} is PENDING but fits "
                    f"(CPU {av.get('CPU')}, GPUs {gpu_avail})"
                )
        for a in st["actors"]:
            d = self.demand.get(a["actor_id"])
            if (
                a["state"] == "PENDING_CREATION"
                and d
                and not d[2]
                and fits_actor(d[0], d[1], av.get("CPU", 0), gpu_avail)
            ):
                self.fail(
                    f"actor {a['actor_id']} (GPU {d[0]}, CPU {d[1]}) is PENDING_CREATION but fits "
                    f"(CPU {av.get('CPU')}, GPUs {gpu_avail})"
                )
        return st

    def quiesce(self, final):
        """Every driver releases all it holds (or exits, or is killed), then
        the daemon must come back to empty."""
        self.note(f"quiesce (final={final})")
        self.count("quiesce")
        for s in self.slots:
            if not s.alive():
                continue
            how = "release" if final else self.rng.choices(["release", "shutdown", "sigkill"], weights=[70, 15, 15])[0]
            if how == "release":
                s.send({"op": "release_all"})
                self.check_ok(s.recv())
                s.reset_model()
            elif how == "shutdown":
                s.send({"op": "exit", "how": "shutdown"})
                s.recv()
                s.kill()
            else:
                s.kill()
        self.settle([s for s in self.slots if s.alive()])
        if final:
            for s in self.slots:
                s.close()
            self.settle([])

    def settle(self, live):
        drivers = {s.pid for s in live}
        last = {}

        def clean():
            for s in live:
                s.send({"op": "flush"}, quiet=True)
                s.recv(quiet=True)
            st = self.status()
            problems = []
            for a in st["actors"]:
                if a["state"] != "DEAD" or a["pid"] or a["running"] or a["queued"]:
                    problems.append(f"actor not cleaned up: {a}")
            if not live and st["actors"]:
                problems.append(f"actor records left with no driver connected: {len(st['actors'])}")
            for k in ("CPU", "GPU"):
                if abs(st["resources_available"].get(k, 0) - st["resources_total"].get(k, 0)) > EPS:
                    problems.append(
                        f"{k}: {st['resources_available'].get(k)} of " f"{st['resources_total'].get(k)} available"
                    )
            if any(g["available"] != 1 for g in st["gpus"]):
                problems.append(f"GPUs not all free: {st['gpus']}")
            for g in st["placement_groups"]:
                if g["state"] != "REMOVED":
                    problems.append(f"group not removed: {g}")
            if st["objects"]["count"] or st["objects"]["bytes"]:
                problems.append(f"objects left: {st['objects']}")
            if st["clients"]["workers"]:
                problems.append(f"worker connections left: {st['clients']}")
            if st["clients"]["drivers"] != len(live):
                problems.append(f"{st['clients']['drivers']} drivers connected, {len(live)} alive")
            procs = set(beam_processes(self.beamd.socket)) - drivers
            if procs:
                problems.append(f"processes left: {describe(procs)}")
            last["problems"] = problems
            return not problems

        if not wait_until(clean, 30, interval=0.1):
            self.fail("not back to empty at quiescence:\n" + "\n".join(last["problems"]))
        self.check_logs()


def run(seed, steps, drivers=3, quiesce_every=40, log=None):
    """One run; returns its stats, raises LifecycleFailure with the seed, the
    last steps and the daemon's log when an invariant breaks."""
    r = Run(seed, steps, drivers=drivers, quiesce_every=quiesce_every, log=log)
    with r:
        stats = r.go()
    r.cleanup()
    return stats
