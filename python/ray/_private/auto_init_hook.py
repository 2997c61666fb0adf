# SPDX-License-Identifier: Apache-2.0
"""Ray's auto-init switch: the first call that needs a runtime (``.remote()``,
``put``, ``get``...) runs ``ray.init()`` unless auto-connect is turned off
(``ray._private.auto_init_hook.enable_auto_connect = False`` or
RAY_ENABLE_AUTO_CONNECT=0), in which case it raises Ray's RaySystemError.
This module holds the switch only; ``ray._private.worker.auto_init_ray``
reads it (so nothing here imports the worker)."""

import os

enable_auto_connect = os.environ.get("RAY_ENABLE_AUTO_CONNECT", "") != "0"
