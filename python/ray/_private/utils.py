# SPDX-License-Identifier: Apache-2.0
"""Small checks Ray keeps in ``ray._private.utils``, shared by ray.init and
the option checks; this module imports nothing of ray."""


def validate_namespace(namespace):
    """Ray's ray._private.utils.validate_namespace."""
    if not isinstance(namespace, str):
        raise TypeError("namespace must be None or a string.")
    if namespace == "":
        raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')
