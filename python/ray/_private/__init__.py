# SPDX-License-Identifier: Apache-2.0
"""beam's runtime internals: the process's connection, ids, serialization."""
