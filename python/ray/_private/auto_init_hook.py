# SPDX-License-Identifier: Apache-2.0
"""Ray's auto-init: the first call that needs a runtime (``.remote()``,
``put``, ``get``...) runs ``ray.init()`` unless auto-connect is turned off
(``ray._private.auto_init_hook.enable_auto_connect = False`` or
RAY_ENABLE_AUTO_CONNECT=0), in which case it raises Ray's RaySystemError."""

import os

enable_auto_connect = os.environ.get("RAY_ENABLE_AUTO_CONNECT", "") != "0"


def auto_init_ray():
    """ray.init() with defaults if auto-connect is on and none ran yet."""
    from ray._private import worker

    if enable_auto_connect and not worker.is_initialized():
        worker.init()
