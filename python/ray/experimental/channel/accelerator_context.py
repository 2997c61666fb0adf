# SPDX-License-Identifier: Apache-2.0
"""``register_accelerator_context``: the communicator class compiled graphs
use for ``with_tensor_transport`` edges.

Register it in the driver before ``experimental_compile()``; the class is
pickled into each actor's plan (so it must be importable there, as vLLM's
``RayPPCommunicator`` is). Without a registered class, tensors on such edges
travel inline in the frames, as every other value does.
"""

import importlib
import threading

from ray.experimental.channel.communicator import Communicator

_lock = threading.Lock()
_global_custom_context = None


class AcceleratorContext:
    """The accelerator's torch module name and its communicator class."""

    def __init__(self, torch_module_name, communicator_cls):
        self._torch_module_name = torch_module_name
        self._communicator_cls = communicator_cls

    @property
    def module_name(self):
        return self._torch_module_name

    @property
    def communicator_cls(self):
        return self._communicator_cls

    @property
    def accelerator_count(self):
        try:
            module = importlib.import_module(f"torch.{self._torch_module_name}")
            return module.device_count()
        except Exception:
            return 0

    @staticmethod
    def get():
        with _lock:
            return _global_custom_context


def register_accelerator_context(torch_module_name, communicator_cls):
    """Use ``communicator_cls`` (a ``Communicator`` subclass) for tensor
    transport in compiled graphs compiled from now on in this process."""
    if not (isinstance(communicator_cls, type) and issubclass(communicator_cls, Communicator)):
        raise TypeError("communicator_cls must be a subclass of ray.experimental.channel.communicator.Communicator")
    global _global_custom_context
    with _lock:
        _global_custom_context = AcceleratorContext(torch_module_name, communicator_cls)


def _registered_communicator():
    with _lock:
        ctx = _global_custom_context
    return None if ctx is None else ctx.communicator_cls
