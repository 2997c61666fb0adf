# SPDX-License-Identifier: Apache-2.0
"""``ray.experimental``: Compiled Graphs' refs (``compiled_dag_ref``) and
channel names (``channel``: the Communicator interface, the accelerator
context where a communicator class is registered). The graph itself lives in
``ray.dag``."""


def __getattr__(name):
    if name == "CompiledDAG":
        # here, not at the top: ray.dag imports ray.experimental (a cycle at
        # import time), and ray.experimental.channel users need no graph
        from ray.dag.compiled_dag_node import CompiledDAG

        return CompiledDAG
    raise AttributeError(f"module 'ray.experimental' has no attribute {name!r}")
