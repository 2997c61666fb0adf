# SPDX-License-Identifier: Apache-2.0
"""Tests for the daemon-free parts of beam's ``ray`` surface.

Covers ray.exceptions, ray.runtime_env, ray.util.metrics, ray.dag,
ray.experimental, ray.cloudpickle and the ray dist-info. Nothing here starts
beamd. Run with ``PYTHONPATH=python /usr/bin/python3 -m pytest
tests/python/test_surface.py`` (the module also puts ``<repo>/python`` on
sys.path itself when it is missing).
"""

import copy
import importlib.metadata
import importlib.util
import os
import pickle
import sys
import warnings

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEAM_PYTHON = os.path.join(REPO, "python")
if BEAM_PYTHON not in [os.path.abspath(p) for p in sys.path if p]:
    sys.path.insert(0, BEAM_PYTHON)

import cloudpickle  # noqa: E402

import ray.cloudpickle  # noqa: E402
import ray.dag  # noqa: E402
import ray.exceptions as E  # noqa: E402
import ray.runtime_env  # noqa: E402
import ray.util.metrics as metrics  # noqa: E402
from ray.runtime_env import RuntimeEnv, RuntimeEnvConfig  # noqa: E402

# -- helpers ----------------------------------------------------------------


class CustomError(Exception):
    """A user exception whose constructor takes two required arguments."""

    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


def raise_and_wrap(exc, **kwargs):
    """Raise ``exc``, catch it and wrap it the way a worker would."""
    try:
        raise exc
    except Exception as caught:
        kwargs.setdefault("pid", 4242)
        kwargs.setdefault("ip", "10.0.0.7")
        return E.RayTaskError.from_exception("Worker.step", caught, **kwargs)


def roundtrips(obj):
    """The object after cloudpickle, pickle and deepcopy round trips."""
    return [
        cloudpickle.loads(cloudpickle.dumps(obj)),
        pickle.loads(pickle.dumps(obj)),
        copy.deepcopy(obj),
    ]


# -- exceptions: hierarchy ---------------------------------------------------


@pytest.mark.parametrize(
    "cls, bases",
    [
        (E.RayError, (Exception,)),
        (E.RayTaskError, (E.RayError,)),
        (E.RayActorError, (E.RayError,)),
        (E.ActorDiedError, (E.RayActorError,)),
        (E.ActorUnavailableError, (E.RayActorError,)),
        (E.GetTimeoutError, (E.RayError, TimeoutError)),
        (E.RaySystemError, (E.RayError,)),
        (E.RayChannelError, (E.RaySystemError,)),
        (E.RayChannelTimeoutError, (E.RayChannelError, TimeoutError)),
        (E.RayCgraphCapacityExceeded, (E.RaySystemError,)),
        (E.OwnerDiedError, (E.ObjectLostError,)),
        (E.ObjectFetchTimedOutError, (E.ObjectLostError,)),
        (E.ReferenceCountingAssertionError, (E.ObjectLostError, AssertionError)),
        (E.ObjectReconstructionFailedError, (E.ObjectLostError,)),
        (E.WorkerCrashedError, (E.RayError,)),
        (E.TaskCancelledError, (E.RayError,)),
        (E.OutOfMemoryError, (E.RayError,)),
        (E.NodeDiedError, (E.RayError,)),
    ],
)
def test_hierarchy(cls, bases):
    for base in bases:
        assert issubclass(cls, base)


def test_get_timeout_error_is_a_timeout_error():
    with pytest.raises(TimeoutError):
        raise E.GetTimeoutError("Get timed out: some object(s) not ready.")


def sample_errors():
    """One instance of every exception class the module exports."""
    task_error = raise_and_wrap(ValueError("x"))
    return [
        E.RayError("plain"),
        task_error,
        E.CrossLanguageError("java said no"),
        E.TaskCancelledError("ffff", "cancelled by user"),
        E.LocalRayletDiedError(),
        E.WorkerCrashedError(),
        E.RayActorError("ab" * 16, "actor gone"),
        E.ActorDiedError(),
        E.ActorDiedError(task_error),
        E.ActorDiedError(error_msg="died because it was killed by `ray.kill`", actor_id="cd" * 16),
        E.ActorUnavailableError("connection lost", b"\x01" * 16),
        E.RaySystemError("daemon went away", "tb"),
        E.UserCodeException("user"),
        E.ObjectStoreFullError("full"),
        E.OutOfDiskError("disk"),
        E.OutOfMemoryError("oom"),
        E.NodeDiedError("node"),
        E.ObjectLostError("aa" * 28, None, "f.py:1 | g.py:2"),
        E.ObjectFetchTimedOutError("aa" * 28, None, ""),
        E.RpcError("rpc", 14),
        E.ReferenceCountingAssertionError("aa" * 28, None, ""),
        E.ObjectFreedError("aa" * 28, None, ""),
        E.OwnerDiedError("aa" * 28, None, ""),
        E.ObjectReconstructionFailedError("aa" * 28, None, ""),
        E.ObjectReconstructionFailedMaxAttemptsExceededError("aa" * 28, None, ""),
        E.ObjectReconstructionFailedLineageEvictedError("aa" * 28, None, ""),
        E.GetTimeoutError("Get timed out: some object(s) not ready."),
        E.PlasmaObjectNotAvailable(),
        E.AsyncioActorExit(),
        E.RuntimeEnvSetupError("pip failed"),
        E.TaskPlacementGroupRemoved(),
        E.ActorPlacementGroupRemoved(),
        E.PendingCallsLimitExceeded(),
        E.TaskUnschedulableError("node dead"),
        E.ActorUnschedulableError("node dead"),
        E.ObjectRefStreamEndOfStreamError(),
        E.RayChannelError("channel closed"),
        E.RayChannelTimeoutError("channel slow"),
        E.RayCgraphCapacityExceeded("too many"),
    ]


@pytest.mark.parametrize("error", sample_errors(), ids=lambda e: type(e).__name__)
def test_every_error_pickles(error):
    for copied in roundtrips(error):
        assert type(copied) is type(error)
        assert str(copied) == str(error)
        assert [str(a) for a in copied.args] == [str(a) for a in error.args]


def test_every_listed_type_is_sampled():
    sampled = {type(e) for e in sample_errors()}
    assert set(E.RAY_EXCEPTION_TYPES) <= sampled


# -- exceptions: RayTaskError ------------------------------------------------


def test_task_error_fields_and_text():
    err = raise_and_wrap(ValueError("bad input"), actor_repr="Worker(rank=0)", actor_id="ab" * 16)
    assert err.function_name == "Worker.step"
    assert err.pid == 4242 and err.ip == "10.0.0.7"
    assert isinstance(err.cause, ValueError)
    assert err.args[:3] == ("Worker.step", err.traceback_str, err.cause)
    text = str(err)
    first = text.splitlines()[0]
    assert first == (f"ray::Worker.step() (pid=4242, ip=10.0.0.7, actor_id={'ab' * 16}, " "repr=Worker(rank=0))")
    assert "ValueError: bad input" in text
    assert "raise_and_wrap" in text  # the user's frames stay


def test_task_error_strips_internal_frames():
    traceback_str = (
        "Traceback (most recent call last):\n"
        '  File "/x/python/ray/_worker.py", line 10, in run\n'
        "    result = method(*args)\n"
        '  File "/app/model.py", line 3, in step\n'
        "    raise KeyError('k')\n"
        "KeyError: 'k'\n"
    )
    err = E.RayTaskError("step", traceback_str, KeyError("k"), proctitle="ray::M.step", pid=1, ip="h")
    lines = str(err).splitlines()
    assert lines[0] == "ray::M.step() (pid=1, ip=h)"
    assert "_worker.py" not in str(err) and "result = method" not in str(err)
    assert lines[1:] == [
        '  File "/app/model.py", line 3, in step',
        "    raise KeyError('k')",
        "KeyError: 'k'",
    ]


def test_task_error_default_ip_and_pid():
    err = E.RayTaskError("f", "ValueError: v", ValueError("v"))
    assert err.pid == os.getpid()
    assert isinstance(err.ip, str) and err.ip
    assert str(err).splitlines()[0].startswith("ray::f() (pid=")


def test_node_ip_before_init_is_the_source_toward_the_address(monkeypatch):
    """Before ray.init, ray.util.get_node_ip_address(address) is the address
    this machine reaches ``address`` from (as Ray's), not always the default
    route's; an error's header and the default agree with the default route."""
    import ray.util

    monkeypatch.delenv("BEAM_NODE_IP", raising=False)
    default = ray.util.get_node_ip_address()
    if default.startswith("127."):
        pytest.skip("no default route here: every address is reached from loopback")
    assert ray.util.get_node_ip_address("127.0.0.1:1") == "127.0.0.1"
    assert ray.util.get_node_ip_address("8.8.8.8:53") == default
    assert E.RayTaskError("f", "ValueError: v", ValueError("v")).ip == default


def test_as_instanceof_cause_dual_class():
    err = raise_and_wrap(ValueError("bad input"))
    dual = err.as_instanceof_cause()
    assert type(dual).__name__ == "RayTaskError(ValueError)"
    assert isinstance(dual, ValueError)
    assert isinstance(dual, E.RayTaskError)
    assert isinstance(dual, E.RayError)
    assert dual.cause is err.cause
    assert dual.args == (err.cause,)
    assert str(dual) == str(err)
    assert dual.pid == 4242 and dual.function_name == "Worker.step"
    with pytest.raises(ValueError):
        raise dual


def test_dual_class_is_cached_and_delegates_attributes():
    first = raise_and_wrap(CustomError(7, "detail")).as_instanceof_cause()
    second = raise_and_wrap(CustomError(8, "other")).as_instanceof_cause()
    assert type(first) is type(second)
    assert type(first).__name__ == "RayTaskError(CustomError)"
    assert first.code == 7 and first.detail == "detail"
    with pytest.raises(AttributeError):
        first.no_such_attribute


def test_dual_pickles():
    dual = raise_and_wrap(CustomError(7, "detail")).as_instanceof_cause()
    for copied in roundtrips(dual):
        assert type(copied) is type(dual)
        assert isinstance(copied, CustomError) and isinstance(copied, E.RayTaskError)
        assert str(copied) == str(dual)
        assert copied.code == 7
        assert copied.args == (copied.cause,)


def test_as_instanceof_cause_returns_self_when_it_must():
    nested = raise_and_wrap(raise_and_wrap(ValueError("inner")))
    assert nested.as_instanceof_cause() is nested
    plain = raise_and_wrap(Exception("generic"))
    assert plain.as_instanceof_cause() is plain
    not_subclassable = E.RayTaskError("f", "tb", True)
    assert not_subclassable.as_instanceof_cause() is not_subclassable


def test_unpicklable_cause_is_replaced():
    import threading

    class HoldsLock(Exception):
        def __init__(self):
            super().__init__("has a lock")
            self.lock = threading.Lock()

    err = raise_and_wrap(HoldsLock())
    assert type(err.cause) is E.RayError
    assert "isn't serializable" in str(err.cause)
    for copied in roundtrips(err):
        assert type(copied.cause) is E.RayError
    assert err.make_picklable() is err


def test_cause_that_cannot_be_unpickled_is_replaced():
    class TwoArgs(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a}{b}")  # args lose b, so loading fails

    err = raise_and_wrap(TwoArgs(1, 2))
    assert type(err.cause) is E.RayError
    assert type(cloudpickle.loads(cloudpickle.dumps(err))) is E.RayTaskError


def test_task_error_without_traceback_formats_the_cause():
    err = E.RayTaskError("f", None, ValueError("v"), pid=1, ip="h")
    assert "ValueError: v" in str(err)


# -- exceptions: actor errors ------------------------------------------------


def test_ray_actor_error_signature():
    err = E.RayActorError(actor_id="ab" * 16, error_msg="gone", actor_init_failed=True, preempted=True)
    assert err.actor_id == "ab" * 16 and str(err) == "gone"
    assert err.actor_init_failed and err.preempted
    assert str(E.RayActorError()) == E.RayActorError.BASE_ERROR_MSG


def test_actor_died_error_forms():
    assert str(E.ActorDiedError()) == "The actor died unexpectedly before finishing this task."
    killed = E.ActorDiedError(error_msg="The actor abc died because it was killed by `ray.kill`", actor_id="cd" * 16)
    assert isinstance(killed, E.RayActorError)
    assert "killed by `ray.kill`" in str(killed)
    assert killed.actor_id == "cd" * 16 and not killed.actor_init_failed
    assert str(E.ActorDiedError("plain message")) == "plain message"

    init_error = raise_and_wrap(RuntimeError("ctor broke"), actor_id="ef" * 16, actor_repr="A()")
    died = E.ActorDiedError(init_error)
    assert died.actor_init_failed
    assert died.actor_id == "ef" * 16
    assert str(died).startswith("The actor died because of an error raised in its creation task")
    assert "ctor broke" in str(died)
    copied = cloudpickle.loads(cloudpickle.dumps(died))
    assert copied.actor_init_failed and copied.actor_id == "ef" * 16


def test_actor_unavailable_error_hexes_the_id():
    err = E.ActorUnavailableError("lost", b"\x01" * 16)
    assert err.actor_id == "01" * 16
    assert "is unavailable: lost" in str(err)


# -- runtime_env ---------------------------------------------------------------


def test_runtime_env_stores_only_given_fields():
    env = RuntimeEnv(env_vars={"A": "1"})
    assert env == {"env_vars": {"A": "1"}}
    assert isinstance(env, dict)
    assert env.env_vars() == {"A": "1"}
    assert env.to_dict() == {"env_vars": {"A": "1"}}
    assert type(env.to_dict()) is dict


def test_runtime_env_empty_is_falsy():
    assert not RuntimeEnv()
    assert RuntimeEnv().to_dict() == {}
    assert RuntimeEnv().env_vars() == {}


def test_runtime_env_fields_and_kwargs():
    env = RuntimeEnv(
        py_modules=["m.zip"],
        working_dir="/w",
        container={"image": "img"},
        worker_process_setup_hook="pkg.hook",
        nsight={"t": "cuda"},
        config={"setup_timeout_seconds": 30},
        my_plugin={"x": 1},
    )
    assert env["_nsight"] == {"t": "cuda"} and env.nsight() == {"t": "cuda"}
    assert isinstance(env["config"], RuntimeEnvConfig)
    assert env["config"]["setup_timeout_seconds"] == 30
    assert env.working_dir() == "/w" and env.py_modules() == ["m.zip"]
    assert env.plugins() == [("my_plugin", {"x": 1})]
    assert type(env.to_dict()["config"]) is dict
    assert RuntimeEnv.deserialize(env.serialize()) == env.to_dict()


def test_runtime_env_validation():
    with pytest.raises(ValueError):
        RuntimeEnv(pip=["a"], conda="env")
    with pytest.raises(TypeError):
        RuntimeEnv(env_vars={"A": 1})
    with pytest.raises(TypeError):
        RuntimeEnv(env_vars=["A"])
    with pytest.raises(TypeError):
        RuntimeEnv(config=5)
    assert RuntimeEnv(env_vars={"A": 1}, _validate=False)["env_vars"] == {"A": 1}


def test_runtime_env_copies_and_pickles():
    env = RuntimeEnv(env_vars={"A": "1"}, nsight={"t": "cuda"})
    for copied in roundtrips(env):
        assert type(copied) is RuntimeEnv
        assert copied == env
    deep = copy.deepcopy(dict(env))
    deep["env_vars"]["B"] = "2"
    assert "B" not in env["env_vars"]


def test_runtime_env_config():
    config = RuntimeEnvConfig()
    assert config == {"setup_timeout_seconds": 600, "eager_install": True}
    assert RuntimeEnvConfig(setup_timeout_seconds=-1)["setup_timeout_seconds"] == -1
    with pytest.raises(ValueError):
        RuntimeEnvConfig(setup_timeout_seconds=0)
    with pytest.raises(TypeError):
        RuntimeEnvConfig(eager_install="yes")
    parsed = RuntimeEnvConfig.parse_and_validate_runtime_env_config({"eager_install": False, "x": 1})
    assert parsed == {"setup_timeout_seconds": 600, "eager_install": False}


def test_merge_runtime_env():
    merge = ray.runtime_env._merge_runtime_env
    assert merge({"env_vars": {"A": "1"}}, {"env_vars": {"B": "2"}}) == {"env_vars": {"A": "1", "B": "2"}}
    assert merge({"env_vars": {"A": "1"}}, {"env_vars": {"A": "2"}}) is None
    assert merge({"env_vars": {"A": "1"}}, {"env_vars": {"A": "2"}}, override=True) == {"env_vars": {"A": "2"}}
    assert merge(None, None) == {}


# -- metrics -------------------------------------------------------------------


def test_metrics_are_noops_with_rays_checks():
    counter = metrics.Counter("requests", description="d", tag_keys=("model",))
    assert counter.set_default_tags({"model": "m"}) is counter
    counter.inc()
    counter.inc(2.5, tags={"model": "n"})
    with pytest.raises(ValueError):
        counter.inc(0)
    with pytest.raises(TypeError):
        counter.inc("1")

    gauge = metrics.Gauge("load", tag_keys=("k",))
    gauge.set(None)
    with pytest.raises(ValueError):
        gauge.set(3)  # tag "k" has no value
    gauge.set(3, tags={"k": "v"})

    histogram = metrics.Histogram("latency", boundaries=[0.1, 1.0])
    histogram.observe(0.5)
    assert histogram.info["boundaries"] == [0.1, 1.0]
    with pytest.raises(ValueError):
        metrics.Histogram("latency")
    with pytest.raises(ValueError):
        metrics.Histogram("latency", boundaries=[0, 1])

    assert isinstance(counter, metrics.Metric)
    assert counter.info == {
        "name": "requests",
        "description": "d",
        "tag_keys": ("model",),
        "default_tags": {"model": "m"},
    }


def test_metric_validation():
    with pytest.raises(ValueError):
        metrics.Gauge("")
    with pytest.raises(TypeError):
        metrics.Gauge("g", tag_keys=["a"])
    with pytest.raises(TypeError):
        metrics.Gauge("g", tag_keys=(1,))
    with pytest.raises(ValueError):
        metrics.Gauge("g", tag_keys=("a",)).set_default_tags({"b": "x"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bad = metrics.Counter("1-bad")
    assert caught and bad._discard_metric
    bad.inc()  # discarded metrics record nothing and check nothing


def test_metrics_pickle():
    for metric in (
        metrics.Counter("c", tag_keys=("a",)),
        metrics.Gauge("g"),
        metrics.Histogram("h", boundaries=[1.0]),
    ):
        copied = cloudpickle.loads(cloudpickle.dumps(metric))
        assert type(copied) is type(metric) and copied.info == metric.info


# -- dag and experimental --------------------------------------------------------


def test_dag_nodes_construct_and_unsupported_parts_say_so():
    # compiling and running graphs is tested end to end in test_cgraph*.py
    with ray.dag.InputNode() as inp:
        assert isinstance(inp, ray.dag.InputNode)
        assert isinstance(inp[0], ray.dag.InputAttributeNode)
    out = ray.dag.MultiOutputNode([inp, inp])
    assert isinstance(out, ray.dag.DAGNode)
    for call in (
        lambda: out.execute(1),
        lambda: out.experimental_compile(enable_asyncio=True),
        lambda: ray.dag.FunctionNode().experimental_compile(),
        lambda: ray.dag.plot(out),
        lambda: ray.dag.unsupported("ActorClass.bind()"),
    ):
        with pytest.raises(NotImplementedError) as info:
            call()
        assert isinstance(info.value, ray.dag.CompiledGraphsNotSupportedError)
        assert "is not available" in str(info.value)


def test_compiled_graph_modules_are_present():
    assert importlib.util.find_spec("ray.experimental.compiled_dag_ref") is not None
    assert importlib.util.find_spec("ray.experimental.channel") is not None
    from ray.experimental.channel.accelerator_context import register_accelerator_context  # noqa: F401
    from ray.experimental.channel.communicator import Communicator, TorchTensorAllocator  # noqa: F401
    from ray.experimental.compiled_dag_ref import CompiledDAGRef  # noqa: F401


# -- cloudpickle and dist-info -------------------------------------------------


def test_cloudpickle_reexport():
    for name in (
        "dumps",
        "loads",
        "dump",
        "load",
        "register_pickle_by_value",
        "unregister_pickle_by_value",
        "CloudPickler",
        "__version__",
    ):
        assert getattr(ray.cloudpickle, name) is getattr(cloudpickle, name), name
    value = {"f": lambda x: x + 1}
    assert ray.cloudpickle.loads(ray.cloudpickle.dumps(value))["f"](1) == 2
    assert ray.cloudpickle.PicklingError is pickle.PicklingError


def test_dist_info_version():
    assert importlib.metadata.version("ray") == "2.43.0"
    ours = list(importlib.metadata.distributions(name="ray", path=[BEAM_PYTHON]))
    assert [d.version for d in ours] == ["2.43.0"]
    assert "beam" in ours[0].metadata["Summary"]
    assert (ours[0].read_text("top_level.txt") or "").split() == ["ray"]
