# SPDX-License-Identifier: Apache-2.0
"""The actor worker: ``python -m ray._worker``, started by beamd, one per actor.

It connects back to beamd with the id and token beamd put in its
environment, receives the pickled class and arguments (``init``), builds the
instance, then runs calls one at a time in the order they were submitted.
It dies with beamd (parent-death signal, and EOF on its socket).
"""

import os
import signal
import sys
import traceback


def _resolve_args(args, kwargs):
    """Top-level ObjectRef arguments are passed as their values, as in Ray."""
    import ray

    refs = [a for a in args if isinstance(a, ray.ObjectRef)]
    refs += [v for v in kwargs.values() if isinstance(v, ray.ObjectRef)]
    if not refs:
        return args, kwargs
    values = dict(zip(refs, ray.get(refs)))
    args = tuple(values[a] if isinstance(a, ray.ObjectRef) else a for a in args)
    kwargs = {k: values[v] if isinstance(v, ray.ObjectRef) else v for k, v in kwargs.items()}
    return args, kwargs


def _task_error(name, exc, class_name, actor_id, actor_repr=None):
    from ray.exceptions import RayTaskError

    # the remote traceback starts at the user's code: this module's frames go
    tb_top = exc.__traceback__
    while tb_top is not None and tb_top.tb_frame.f_code.co_filename == __file__:
        tb_top = tb_top.tb_next
    tb = "".join(traceback.format_exception(type(exc), exc, tb_top))
    return RayTaskError(name, tb, exc, proctitle=f"ray::{class_name}.{name}", pid=os.getpid(),
                        actor_repr=actor_repr or class_name, actor_id=actor_id)


def _actor_repr(instance):
    """The actor's own __repr__ when its class defines one (Ray's repr=)."""
    if instance is None or type(instance).__repr__ is object.__repr__:
        return None
    try:
        return repr(instance)
    except Exception:
        return None


class Worker:
    def __init__(self, rt):
        self.rt = rt
        self.client = rt.client
        self.instance = None
        self.class_name = "Actor"

    def construct(self, init):
        from ray._private import serialization as ser
        from ray.actor import ActorHandle

        for p in reversed(init.get("sys_path") or []):
            if p not in sys.path:
                sys.path.insert(0, p)
        self.class_name = init["class_name"]
        self.rt.gpu_ids = list(init.get("gpu_ids") or [])
        self.rt.actor_name = init.get("name") or None
        self.rt.placement_group_id = init.get("placement_group") or None
        self.rt.capture_child_tasks = bool(init.get("capture_child_tasks"))
        self.rt.assigned_resources = dict(init.get("resources") or {})
        # not counted: an actor's handle to itself must not keep it alive
        self.rt.actor_handle = ActorHandle(self.rt.actor_id, self.class_name, None, _counted=False)
        try:
            cls = ser.loads(init["class_data"])
            args, kwargs = ser.loads(init["args"])
            args, kwargs = _resolve_args(args, kwargs)
            self.instance = cls(*args, **kwargs)
        except Exception as e:
            err = _task_error("__init__", e, self.class_name, self.rt.actor_id.hex())
            self.client.send("actor_ready", {"ok": False, "error": str(err)})
            self.client.close()
            os._exit(1)
        self.client.send("actor_ready", {"ok": True})

    def _method(self, name):
        import inspect

        if name == "__ray_ready__":
            return lambda: True
        if name == "__ray_call__":
            return lambda fn, *a, **k: fn(self.instance, *a, **k)
        # the method comes from the class, as Ray's method table: neither an
        # instance attribute of the same name nor an instance __getattr__ counts
        cls = type(self.instance)
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            raise AttributeError(f"'{self.class_name}' object has no attribute '{name}'") from None
        get = getattr(type(attr), "__get__", None)
        return get(attr, self.instance, cls) if get is not None else attr

    def call(self, params):
        from ray._private import serialization as ser

        name = params["method"]
        status, objs, actors = 0, [], []
        try:
            if name == "__ray_terminate__":
                self.reply(params["obj"], 0, ser.dumps(None)[0], [], [])
                self.client.close()
                os._exit(0)
            self.rt.task_id = params["obj"][:24]  # an ObjectID starts with its TaskID
            args, kwargs = ser.loads(params["args"])
            args, kwargs = _resolve_args(args, kwargs)
            result = self._method(name)(*args, **kwargs)
            data, objs, actors = ser.dumps(result)
        except Exception as e:
            status = 1
            err = _task_error(name, e, self.class_name, self.rt.actor_id.hex(), _actor_repr(self.instance))
            try:
                data = ser.dumps(err)[0]
            except Exception as pickle_error:
                data = ser.dumps(_task_error(name, TypeError(f"the error could not be pickled: {pickle_error}"),
                                             self.class_name, self.rt.actor_id.hex()))[0]
        try:
            self.reply(params["obj"], status, data, objs, actors)
        except ValueError as e:
            # the result does not fit in one frame: the call fails, the actor lives
            del data
            err = _task_error(name, ValueError(f"the result of {self.class_name}.{name}() could not be sent: {e}"),
                              self.class_name, self.rt.actor_id.hex())
            self.reply(params["obj"], 1, ser.dumps(err)[0], [], [])

    def reply(self, obj, status, data, objs, actors):
        from ray._private import serialization as ser

        self.client.send("task_done", ser.with_refs({"obj": obj, "status": status, "data": data}, objs, actors))

    def serve(self):
        while True:
            try:
                push = self.client.next_push()
            except ConnectionError:
                os._exit(0)  # beamd is gone: so is this actor
            if push is None:
                continue
            op, params = push
            if op == "call":
                self.call(params)
                # the call's refs died with it; _beam only sends queued
                # releases with a later message, and an idle worker sends none
                try:
                    self.client.flush()
                except ConnectionError:
                    os._exit(0)


def main():
    import _beam

    parent = int(os.environ.get("BEAM_PARENT_PID", "0") or 0)
    ppid = _beam.set_parent_death_signal(signal.SIGKILL)
    if ppid == 1 or (parent and ppid != parent):
        os._exit(1)
    from ray._private import worker as rtmod

    actor_id = bytes.fromhex(os.environ["BEAM_ACTOR_ID"])
    rt = rtmod.connect_worker(os.environ["BEAM_SOCKET"], actor_id, os.environ["BEAM_WORKER_TOKEN"])
    push = rt.client.next_push()
    if push is None or push[0] != "init":
        os._exit(1)
    worker = Worker(rt)
    worker.construct(push[1])
    worker.serve()


if __name__ == "__main__":
    main()
