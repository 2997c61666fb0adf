# SPDX-License-Identifier: Apache-2.0
"""Ray's `ray` command on beam (ray.scripts.scripts:main)."""
