# SPDX-License-Identifier: Apache-2.0
"""The sync call's fast paths keep the slow paths' behaviour: plain values
pickle to cloudpickle's own bytes, a call's positional arguments are checked
against the method's signature as Signature.bind checks them, and a worker
runs the method the class defines (its own, inherited, static, class)."""

import inspect

import cloudpickle
import pytest

import ray
from ray._private import serialization as ser


class _Int(int):
    pass


def _fn():
    return 1


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -1,
        2**80,
        1.5,
        "",
        "x" * 100,
        "\udcff",
        b"",
        b"ab",
        ((1,), {}),
        [1, [2, (3, {"k": None})]],
        {"k": list(range(16)), "s": "x" * 100},
        list(range(100)),
        _Int(3),
        (_fn,),
        {1.5: b"x"},
        [float("nan")],
    ],
)
def test_dumps_is_cloudpickle_and_round_trips(value):
    data, objs, actors = ser.dumps(value)
    if ser._plain(value, ser._PLAIN_MAX) >= 0:
        assert data == cloudpickle.dumps(value, protocol=ser.PROTOCOL)
    back = ser.loads(data)
    assert repr(back) == repr(value)
    assert type(back) is type(value)
    assert (objs, actors) == ([], [])


def test_dumps_of_a_self_containing_list_falls_back():
    cycle = []
    cycle.append(cycle)
    assert ser._plain(cycle, ser._PLAIN_MAX) == -1
    back = ser.loads(ser.dumps(cycle)[0])
    assert back[0] is back


class Shapes:
    def none(self):
        return "none"

    def two(self, a, b):
        return a + b

    def defaults(self, a, b=2, c=3):
        return a + b + c

    def star(self, a, *rest):
        return a + sum(rest)

    def kwonly(self, a, *, k):
        return a + k

    def kwonly_default(self, a, *, k=10):
        return a + k

    def posonly(self, a, b=5, /):
        return a * b

    @staticmethod
    def static(a):
        return ("static", a)

    @classmethod
    def klass(cls, a):
        return (cls.__name__, a)

    def ref(self, r):
        return r + 1


class Derived(Shapes):
    def own(self):
        return "own"


def _binds(fn, args):
    try:
        inspect.signature(fn).bind(None, *args)
        return True
    except TypeError:
        return False


def test_remote_checks_positional_arguments_as_bind(ray_start):
    a = ray.remote(Shapes).remote()
    for name in ("none", "two", "defaults", "star", "kwonly", "kwonly_default", "posonly"):
        method = getattr(Shapes, name)
        for n in range(5):
            args = tuple(range(1, n + 1))
            if _binds(method, args):
                assert ray.get(getattr(a, name).remote(*args)) == method(None, *args)
            else:
                with pytest.raises(TypeError):
                    getattr(a, name).remote(*args)
    assert ray.get(a.kwonly.remote(1, k=2)) == 3
    with pytest.raises(TypeError):
        a.two.remote(1, c=2)


def test_worker_runs_the_class_method_of_each_kind(ray_start):
    d = ray.remote(Derived).remote()
    assert ray.get(d.own.remote()) == "own"
    assert ray.get(d.two.remote(1, 2)) == 3  # inherited
    assert ray.get(d.static.remote(4)) == ("static", 4)
    assert ray.get(d.klass.remote(5)) == ("Derived", 5)
    assert ray.get(d.ref.remote(ray.put(41))) == 42  # a top-level ref is passed as its value
