# SPDX-License-Identifier: Apache-2.0
"""``ray.cloudpickle``: the system ``cloudpickle``, under Ray's name.

Ray vendors its own copy; beam uses the installed one, so values pickled by
either name are the same bytes. vLLM calls
``ray.cloudpickle.register_pickle_by_value(module)`` to ship
``trust_remote_code`` modules to workers by value; that registers with the one
cloudpickle beam's serializer uses too.
"""

import pickle as _pickle

import cloudpickle as _cloudpickle
from cloudpickle import *  # noqa: F401,F403
from cloudpickle import (  # noqa: F401
    CloudPickler,
    Pickler,
    __version__,
    dump,
    dumps,
    load,
    loads,
    register_pickle_by_value,
    unregister_pickle_by_value,
)

PicklingError = _pickle.PicklingError
UnpicklingError = _pickle.UnpicklingError
DEFAULT_PROTOCOL = getattr(_cloudpickle, "DEFAULT_PROTOCOL", _pickle.HIGHEST_PROTOCOL)
