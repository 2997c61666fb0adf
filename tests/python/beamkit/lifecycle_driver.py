# SPDX-License-Identifier: Apache-2.0
"""One driver of the randomized lifecycle test (beamkit/lifecycle.py).

Run as ``python -m beamkit.lifecycle_driver``: it does ``ray.init()`` (BEAM_SOCKET
names the daemon), then reads one JSON command a line on stdin and answers
one JSON line on stdout, so the test decides every step and the driver only
carries it out with the public ``ray`` API. Names in commands are the test's:
the driver keeps its actor handles, ObjectRefs and placement groups under
them, and forgets (``del``) them when told. A reply is
``{"ok": RESULT}`` or ``{"error": "ExceptionType", "message": "..."}``; an
error of the harness itself (a bad command) ends the driver.
"""

import gc
import json
import os
import subprocess
import sys
import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote
class A:
    def __init__(self, fail=False):
        if fail:
            raise ValueError("the constructor was told to fail")
        self.children = []

    def ping(self):
        return "pong"

    def echo(self, x):
        return x

    def pid(self):
        return os.getpid()

    def sleep(self, s):
        time.sleep(s)
        return s

    def fail(self):
        raise ValueError("the method was told to fail")

    def die(self):
        os._exit(1)

    def child(self):
        """Starts a subprocess that outlives this call (not this actor)."""
        p = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        self.children.append(p)
        return p.pid

    def gpus(self):
        return ray.get_gpu_ids()

    def nest(self, num_gpus, keep):
        """Creates an actor owned by this one (this worker is its owner);
        keeps its handle, or drops it at once (perhaps still pending)."""
        inner = A.options(num_gpus=num_gpus, num_cpus=0).remote()
        hexid = inner._actor_id.hex()
        if keep:
            self.children.append(inner)
            ray.wait([inner.ping.remote()], timeout=0.2)
        return hexid


def outcome(exc):
    """The name a failure is reported under: the Ray exception type, and
    for a task error the cause's type too."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        return f"RayTaskError({type(exc.cause).__name__})"
    return type(exc).__name__


class Driver:
    def __init__(self):
        self.actors = {}
        self.refs = {}
        self.pgs = {}

    # --- actors ---

    def op_create(self, c):
        opts = {"num_cpus": c["num_cpus"], "num_gpus": c["num_gpus"]}
        if c.get("pg"):
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=self.pgs[c["pg"]], placement_group_bundle_index=c.get("bundle", -1)
            )
        if c.get("actor_name"):
            opts["name"] = c["actor_name"]
        h = A.options(**opts).remote(fail=c.get("fail_init", False))
        self.actors[c["name"]] = h
        return h._actor_id.hex()

    def op_call(self, c):
        h = self.actors[c["actor"]]
        args = [self.arg(a) for a in c.get("args", [])]
        self.refs[c["ref"]] = getattr(h, c["method"]).remote(*args)
        return None

    def arg(self, a):
        if isinstance(a, dict) and "ref" in a:
            return self.refs[a["ref"]]
        if isinstance(a, dict) and "actor" in a:
            return self.actors[a["actor"]]
        return a

    def op_lookup(self, c):
        """ray.get_actor(name), kept under c["as"]."""
        h = ray.get_actor(c["actor_name"])
        self.actors[c["as"]] = h
        return h._actor_id.hex()

    def op_kill(self, c):
        ray.kill(self.actors[c["actor"]])
        return None

    # --- objects ---

    def op_put(self, c):
        self.refs[c["ref"]] = ray.put(value_of(c["ref"], c["size"]))
        return None

    def op_get(self, c):
        refs = [self.refs[n] for n in c["refs"]]
        try:
            values = ray.get(refs, timeout=c["timeout"])
        except Exception as e:  # noqa: BLE001 - reported to the test
            return {"raised": outcome(e), "message": str(e)[:300]}
        return {"values": [summary(v) for v in values]}

    def op_wait(self, c):
        refs = [self.refs[n] for n in c["refs"]]
        ready, rest = ray.wait(refs, num_returns=c["num_returns"], timeout=c["timeout"])
        names = {id(r): n for n, r in zip(c["refs"], refs)}
        return {"ready": [names[id(r)] for r in ready], "rest": [names[id(r)] for r in rest]}

    # --- placement groups ---

    def op_pg_create(self, c):
        pg = placement_group(c["bundles"], strategy=c["strategy"])
        self.pgs[c["name"]] = pg
        return pg.id.hex()

    def op_pg_remove(self, c):
        remove_placement_group(self.pgs[c["name"]])
        return None

    def op_pg_wait(self, c):
        return self.pgs[c["name"]].wait(c["timeout"])

    # --- lifetimes ---

    def op_del(self, c):
        for n in c["names"]:
            for table in (self.actors, self.refs, self.pgs):
                table.pop(n, None)
        return None

    def op_release_all(self, c):
        """Removes every group this driver made, then drops every name."""
        for pg in self.pgs.values():
            remove_placement_group(pg)
        self.actors.clear()
        self.refs.clear()
        self.pgs.clear()
        self.flush()
        return None

    def op_flush(self, c):
        self.flush()
        return None

    def flush(self):
        from ray._private import worker as rtmod

        gc.collect()
        rtmod.runtime().client.flush()

    def op_exit(self, c):
        if c["how"] == "shutdown":
            ray.shutdown()
        reply({"ok": None})
        sys.stdout.flush()
        os._exit(0)


def value_of(name, size):
    return {"name": name, "data": bytes((len(name) + i) % 251 for i in range(size))}


def summary(v):
    """What the test compares a value with (JSON-able, small)."""
    if isinstance(v, ray.actor.ActorHandle):
        return {"handle": v._actor_id.hex()}
    if isinstance(v, dict) and "data" in v:
        return {
            "name": v["name"],
            "size": len(v["data"]),
            "intact": v["data"] == value_of(v["name"], len(v["data"]))["data"],
        }
    return v


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ray.init(namespace="lifecycle")  # named actors are looked up across drivers
    d = Driver()
    reply({"ok": {"pid": os.getpid()}})
    for line in sys.stdin:
        c = json.loads(line)
        fn = getattr(d, "op_" + c["op"])
        try:
            result = fn(c)
        except Exception as e:  # noqa: BLE001 - reported to the test
            reply({"error": outcome(e), "message": str(e)[:300]})
            continue
        reply({"ok": result})


if __name__ == "__main__":
    main()
