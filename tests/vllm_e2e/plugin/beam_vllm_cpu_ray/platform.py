# SPDX-License-Identifier: Apache-2.0
"""The platform class (imported by vLLM after the plugin is chosen)."""

from vllm.platforms.cpu import CpuPlatform


class CpuRayPlatform(CpuPlatform):
    ray_device_key: str = "GPU"
