# SPDX-License-Identifier: Apache-2.0
"""``RuntimeEnv`` and ``RuntimeEnvConfig``: the runtime-environment spec.

This module owns the data type only. A ``RuntimeEnv`` is a dict holding just
the fields that were given, so it can be used wherever Ray accepts a plain
runtime_env dict, pickled into an actor, deep-copied, and tested for
emptiness (falsy when empty). What beam does with one (today: ``env_vars`` is
applied in the actor's worker before user code runs; the other fields are
carried but not acted on) is the core runtime's business, not this module's.

Like Ray 2.43, ``nsight=`` is stored under the key ``"_nsight"`` and read back
with ``nsight()``; ``config=`` is stored as a ``RuntimeEnvConfig``.
"""

import json
from copy import deepcopy

__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]

DEFAULT_SETUP_TIMEOUT_SECONDS = 600


class RuntimeEnvConfig(dict):
    """Options about setting up a runtime environment, not part of it.

    ``setup_timeout_seconds`` is a positive int or -1 (no timeout);
    ``eager_install`` a bool.
    """

    known_fields = {"setup_timeout_seconds", "eager_install"}

    _default_config = {
        "setup_timeout_seconds": DEFAULT_SETUP_TIMEOUT_SECONDS,
        "eager_install": True,
    }

    def __init__(
        self,
        setup_timeout_seconds=DEFAULT_SETUP_TIMEOUT_SECONDS,
        eager_install=True,
    ):
        super().__init__()
        if not isinstance(setup_timeout_seconds, int) or isinstance(setup_timeout_seconds, bool):
            raise TypeError("setup_timeout_seconds must be of type int, " f"got: {type(setup_timeout_seconds)}")
        if setup_timeout_seconds <= 0 and setup_timeout_seconds != -1:
            raise ValueError(
                "setup_timeout_seconds must be greater than zero or equal to -1, " f"got: {setup_timeout_seconds}"
            )
        if not isinstance(eager_install, bool):
            raise TypeError(f"eager_install must be a boolean. got {type(eager_install)}")
        self["setup_timeout_seconds"] = setup_timeout_seconds
        self["eager_install"] = eager_install

    @staticmethod
    def parse_and_validate_runtime_env_config(config):
        """Return ``config`` (a dict or RuntimeEnvConfig) as a RuntimeEnvConfig.

        Unknown keys of a dict are dropped; anything else is a TypeError.
        """
        if isinstance(config, RuntimeEnvConfig):
            return config
        if isinstance(config, dict):
            known = {k: v for k, v in config.items() if k in RuntimeEnvConfig.known_fields}
            return RuntimeEnvConfig(**known)
        raise TypeError("runtime_env['config'] must be of type dict or RuntimeEnvConfig, " f"got: {type(config)}")

    @classmethod
    def default_config(cls):
        return cls(**cls._default_config)

    def to_dict(self):
        return dict(deepcopy(self))


def _check_env_vars(env_vars):
    if not isinstance(env_vars, dict):
        raise TypeError("runtime_env['env_vars'] must be of type Dict[str, str], " f"got {type(env_vars)}")
    for key, value in env_vars.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                "runtime_env['env_vars'] must be of type Dict[str, str], "
                f"but the key {key!r} maps to {value!r} ({type(value)})"
            )


def _check_str_list(field, value):
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"runtime_env['{field}'] must be a list of strings, got {value!r}")


def _check_runtime_env(env):
    """Check the fields of ``env`` (a RuntimeEnv) that beam understands."""
    if env.get("conda") and env.get("pip"):
        raise ValueError(
            "The 'pip' field and 'conda' field of runtime_env cannot both be "
            f"specified.\nspecified pip field: {env['pip']}\nspecified conda "
            f"field: {env['conda']}\nTo use pip with conda, please only set the "
            "'conda' field, and specify your pip dependencies within the conda "
            "YAML config dict."
        )
    if "env_vars" in env:
        _check_env_vars(env["env_vars"])
    if "working_dir" in env and not isinstance(env["working_dir"], str):
        raise TypeError(f"runtime_env['working_dir'] must be a str, got {type(env['working_dir'])}")
    if "py_modules" in env:
        _check_str_list("py_modules", env["py_modules"])
    if "config" in env:
        dict.__setitem__(
            env,
            "config",
            RuntimeEnvConfig.parse_and_validate_runtime_env_config(env["config"]),
        )


class RuntimeEnv(dict):
    """A runtime environment for a job, task or actor; a dict of the fields
    that were given.

    ``RuntimeEnv(env_vars={"A": "1"})`` equals ``{"env_vars": {"A": "1"}}``.
    Unknown keyword arguments are kept as-is (Ray treats them as plugins).
    ``_validate=False`` skips the checks (for rebuilding a known-good one).
    """

    known_fields = {
        "py_modules",
        "java_jars",
        "working_dir",
        "conda",
        "pip",
        "container",
        "excludes",
        "env_vars",
        "_ray_release",
        "_ray_commit",
        "_inject_current_ray",
        "config",
        "docker",
        "worker_process_setup_hook",
        "_nsight",
    }

    extensions_fields = {"_ray_release", "_ray_commit", "_inject_current_ray"}

    def __init__(
        self,
        *,
        py_modules=None,
        working_dir=None,
        pip=None,
        conda=None,
        container=None,
        env_vars=None,
        worker_process_setup_hook=None,
        nsight=None,
        config=None,
        _validate=True,
        **kwargs,
    ):
        super().__init__()
        given = {
            "py_modules": py_modules,
            "working_dir": working_dir,
            "pip": pip,
            "conda": conda,
            "container": container,
            "env_vars": env_vars,
            "worker_process_setup_hook": worker_process_setup_hook,
            "_nsight": nsight,
            "config": config,
        }
        for key, value in given.items():
            if value is not None:
                self[key] = value
        for key, value in kwargs.items():
            if value is not None:
                self[key] = value
        if _validate:
            _check_runtime_env(self)

    def set(self, name, value):
        """Set field ``name``; the same as ``self[name] = value``."""
        self[name] = value

    def get(self, name, default=None, data_class=None):
        """Return field ``name`` (or ``default``); with ``data_class``, build
        that class from the field's dict."""
        if name not in self:
            return default
        value = self[name]
        if data_class is not None:
            return data_class(**value)
        return value

    @classmethod
    def deserialize(cls, serialized_runtime_env):
        """Rebuild a RuntimeEnv from ``serialize()``'s JSON text."""
        return cls(_validate=False, **json.loads(serialized_runtime_env))

    def serialize(self):
        """This runtime env as JSON text (keys sorted)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_dict(self):
        """A deep copy as a plain dict (``config`` as a plain dict too)."""
        out = dict(deepcopy(self))
        if out.get("config"):
            out["config"] = dict(out["config"])
        return out

    def env_vars(self):
        return self.get("env_vars", {})

    def working_dir(self):
        return self.get("working_dir", "")

    def has_working_dir(self):
        return self.get("working_dir") is not None

    def working_dir_uri(self):
        return self.get("working_dir")

    def py_modules(self):
        return list(self.get("py_modules", []))

    def py_modules_uris(self):
        return self.py_modules()

    def java_jars(self):
        return list(self.get("java_jars", []))

    def nsight(self):
        return self.get("_nsight")

    def plugin_uris(self):
        return []

    def has_conda(self):
        return bool(self.get("conda"))

    def conda_env_name(self):
        conda = self.get("conda")
        return conda if isinstance(conda, str) and conda else None

    def conda_config(self):
        conda = self.get("conda")
        if not isinstance(conda, dict) or not conda:
            return None
        return json.dumps(conda, sort_keys=True)

    def has_pip(self):
        return bool(self.get("pip"))

    def virtualenv_name(self):
        pip = self.get("pip")
        return pip if isinstance(pip, str) and pip else None

    def pip_config(self):
        """The pip field as a dict (``{"packages": [...]}`` for a list)."""
        pip = self.get("pip")
        if not pip or isinstance(pip, str):
            return {}
        if isinstance(pip, dict):
            return pip
        return {"packages": list(pip), "pip_check": False}

    def has_py_container(self):
        return bool(self.get("container"))

    def py_container_image(self):
        return self["container"].get("image", "") if self.has_py_container() else None

    def py_container_worker_path(self):
        if not self.has_py_container():
            return None
        return self["container"].get("worker_path", "")

    def py_container_run_options(self):
        if not self.has_py_container():
            return None
        return self["container"].get("run_options", [])

    def get_extension(self, key):
        if key not in RuntimeEnv.extensions_fields:
            raise ValueError(f"Extension key must be one of {RuntimeEnv.extensions_fields}, got: {key}")
        return self.get(key)

    def plugins(self):
        """``(name, value)`` for each field that is not a known one."""
        return [(k, v) for k, v in self.items() if k not in self.known_fields]


def _merge_runtime_env(parent, child, override=False):
    """Merge two runtime envs field by field, ``env_vars`` key by key.

    Returns the merged dict, or None when they conflict and ``override`` is
    False; with ``override`` the child wins. None inputs count as empty.
    """
    parent = deepcopy(dict(parent or {}))
    child = deepcopy(dict(child or {}))
    parent_vars = parent.pop("env_vars", {}) or {}
    child_vars = child.pop("env_vars", {}) or {}
    if not override and (set(parent) & set(child) or set(parent_vars) & set(child_vars)):
        return None
    parent.update(child)
    parent_vars.update(child_vars)
    if parent_vars:
        parent["env_vars"] = parent_vars
    return parent
