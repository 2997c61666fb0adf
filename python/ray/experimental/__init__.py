# SPDX-License-Identifier: Apache-2.0
"""``ray.experimental``: present as a package, empty on purpose.

Ray keeps Compiled Graphs here (``compiled_dag_ref``, ``channel``). beam
deliberately has neither submodule: vLLM's ``RayDistributedExecutor`` checks
``importlib.util.find_spec("ray.experimental.compiled_dag_ref")`` before it
builds a compiled graph, and with that spec absent it stops with its own
"Ray Compiled Graph is not installed" error instead of half-working. vLLM's
default executor, RayExecutorV2, never looks here. Do not add those modules
without implementing Compiled Graphs.
"""
