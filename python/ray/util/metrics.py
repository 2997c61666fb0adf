# SPDX-License-Identifier: Apache-2.0
"""Ray's custom-metrics API (``Counter``, ``Gauge``, ``Histogram``) as no-ops.

beam exports no metrics. This module keeps the classes, their constructor
signatures and Ray's argument checks, so code that defines and records
metrics (vLLM's Ray Serve stat logger, for one) runs unchanged and records
nothing. Recording still validates tags and values as Ray does, so a mistake
shows up here rather than only under real Ray.
"""

import re
import warnings

__all__ = ["Counter", "Histogram", "Gauge", "Metric"]

# Prometheus's rule for metric names.
_VALID_METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _check_value(value):
    if not isinstance(value, (int, float)):
        raise TypeError(f"value must be int or float, got {type(value)}.")


class Metric:
    """Base of the metric classes: a name, a description, tag keys and
    default tags. ``tag_keys`` must be a tuple of str."""

    def __init__(self, name, description="", tag_keys=None):
        self._discard_metric = self._is_invalid_metric_name(name)
        self._name = name
        self._description = description
        self._default_tags = {}
        self._tag_keys = tag_keys or tuple()
        if not isinstance(self._tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(self._tag_keys)}")
        for key in self._tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")

    @staticmethod
    def _is_invalid_metric_name(name):
        """Raise on an empty name; warn and return True on one Prometheus
        would reject (Ray then discards the metric)."""
        if not name:
            raise ValueError("Empty name is not allowed. Please provide a metric name.")
        if not _VALID_METRIC_NAME_RE.match(name):
            warnings.warn(
                f"Invalid metric name: {name}. Metric will be discarded and data "
                "will not be collected or published. Metric names can only "
                "contain letters, numbers, _, and :. Metric names cannot start "
                "with numbers.",
                UserWarning,
            )
            return True
        return False

    def set_default_tags(self, default_tags):
        """Set the tags used when a record call gives none; returns self."""
        for key, value in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key}.")
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        self._default_tags = default_tags
        return self

    def _final_tags(self, tags):
        if not tags:
            return self._default_tags
        for value in tags.values():
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        return {**self._default_tags, **tags}

    def _record(self, value, tags=None):
        """Check ``tags`` the way Ray does, then drop the point."""
        if self._discard_metric:
            return
        final = self._final_tags(tags)
        missing = [key for key in self._tag_keys if key not in final]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")

    @property
    def info(self):
        """The metric's name, description, tag keys and default tags."""
        return {
            "name": self._name,
            "description": self._description,
            "tag_keys": self._tag_keys,
            "default_tags": self._default_tags,
        }

    def __reduce__(self):
        return type(self), (self._name, self._description, self._tag_keys)


class Counter(Metric):
    """A count that only goes up."""

    def inc(self, value=1.0, tags=None):
        """Add ``value`` (> 0) to the counter."""
        _check_value(value)
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        self._record(value, tags)


class Gauge(Metric):
    """A value that is set, up or down; ``set(None)`` does nothing."""

    def set(self, value, tags=None):
        """Set the gauge to ``value``."""
        if value is None:
            return
        _check_value(value)
        self._record(value, tags)


class Histogram(Metric):
    """Observations counted into buckets bounded by ``boundaries`` (a
    non-empty list of positive numbers)."""

    def __init__(self, name, description="", boundaries=None, tag_keys=None):
        super().__init__(name, description, tag_keys)
        if not boundaries:
            raise ValueError(
                "boundaries argument should be provided when using the Histogram "
                'class. e.g., Histogram("name", boundaries=[1.0, 2.0])'
            )
        for index, boundary in enumerate(boundaries):
            if boundary <= 0:
                raise ValueError(
                    f"Invalid `boundaries` argument at index {index}, {boundaries}. "
                    "Use positive values for the arguments."
                )
        self.boundaries = boundaries

    def observe(self, value, tags=None):
        """Record one observation of ``value``."""
        _check_value(value)
        self._record(value, tags)

    @property
    def info(self):
        info = super().info
        info["boundaries"] = self.boundaries
        return info

    def __reduce__(self):
        return Histogram, (self._name, self._description, self.boundaries, self._tag_keys)
