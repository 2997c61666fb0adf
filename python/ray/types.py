# SPDX-License-Identifier: Apache-2.0
"""ray.types: ObjectRef, a real class (vLLM writes ``ObjectRef | None`` at
class creation)."""

from ray._private.object_ref import ObjectRef

__all__ = ["ObjectRef"]
