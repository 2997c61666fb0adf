# SPDX-License-Identifier: Apache-2.0
"""``TorchTensorType``: the type hint Ray's ``with_type_hint`` takes to mark a
node's tensors for a transport; ``with_tensor_transport(t)`` is the same."""


class TorchTensorType:
    AUTO = "auto"
    NCCL = "nccl"
    CPU = "cpu"
    ACCELERATOR = "accelerator"

    def __init__(self, transport="auto", device="default", _static_shape=False, _direct_return=False):
        self.transport = transport
        self.device = device
        self.static_shape = _static_shape
        self.direct_return = _direct_return
