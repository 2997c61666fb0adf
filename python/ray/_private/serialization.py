# SPDX-License-Identifier: Apache-2.0
"""Values to bytes and back: cloudpickle, recording the ObjectRefs and
ActorHandles a value carries so the daemon can pin them while it travels."""

import cloudpickle

from ray._private import refcount as _refcount

PROTOCOL = 5


def dumps(value):
    """Returns (bytes, [object ids], [actor ids]) for value."""
    with _refcount.collect() as found:
        data = cloudpickle.dumps(value, protocol=PROTOCOL)
    return data, _unique(found[0]), _unique(found[1])


def with_refs(params, objs, actors):
    """Adds the carried ids to a request's params (only when there are some)."""
    if objs:
        params["objects"] = objs
    if actors:
        params["actors"] = actors
    return params


def loads(data):
    return cloudpickle.loads(data)


def _unique(ids):
    if len(ids) < 2:
        return ids
    return list(dict.fromkeys(ids))
