# SPDX-License-Identifier: Apache-2.0
"""vLLM platform plugin for the end-to-end kit: vLLM's CPU platform, allowed
the Ray executor. vLLM's CpuPlatform leaves `ray_device_key` empty, which
makes its Ray executor refuse to start; with "GPU" the executor asks each
worker for one (pretend) GPU, as it does on CUDA, and the placement group
puts one worker on each. Nothing else of vLLM changes."""


def platform():
    """The entry point vLLM calls: the platform's qualified name, or None
    (not active) where the CPU platform would not be chosen."""
    from vllm.platforms import cpu_platform_plugin

    if cpu_platform_plugin() is None:
        return None
    return "beam_vllm_cpu_ray.platform.CpuRayPlatform"
