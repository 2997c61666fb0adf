#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""List every ``ray`` symbol a vLLM checkout touches and check beam has it.

Usage::

    scan_vllm_ray.py PATH_TO_VLLM_CHECKOUT [--json] [--beam-python DIR]

The scanner owns one question: which names of Ray's Python API does this
code use, and does beam's ``ray`` package provide each one? It reads every
``.py`` file under PATH with ``ast`` (it never imports or runs that code) and
collects:

* ``import ray``, ``import ray.x.y [as z]``, ``from ray.x import y [as z]``,
  at module level, inside functions, and inside ``if TYPE_CHECKING:`` blocks
  (those are marked type-only);
* attribute chains on the names those imports bind, wherever they appear
  (``ray.util.state.list_nodes``, ``ray.exceptions.GetTimeoutError`` in an
  ``except``, ``ray.actor.ActorHandle`` in an annotation; string
  annotations, annotations of assignments inside functions, and every
  annotation in a file with ``from __future__ import annotations`` count as
  type-only, since Python never evaluates them), noting whether the chain is
  called;
* ``from some.module import ray`` when ``some.module`` is a file of the
  scanned tree that itself does ``import ray`` (a re-export);
* string arguments of ``importlib.util.find_spec("ray...")`` and
  ``importlib.import_module("ray...")``;
* option keywords: every keyword of ``ray.remote(...)`` and
  ``ray.method(...)`` (as calls or decorators), and the keywords of any
  ``X.options(...)`` that are Ray option names (``RAY_OPTION_NAMES``) in a
  file that touches ray, each with its literal values where the code spells
  them out (``**kwargs`` cannot be seen).

Only files whose text holds the word ``ray`` are parsed (nothing else can
touch it); the others are counted.

Each distinct symbol is then resolved against beam's own ``ray`` (by default
``<repo>/python``, found from this script's location, put first on
``sys.path``): import ``ray`` and walk the dotted path attribute by
attribute, importing a submodule where the attribute is not there yet; if
that fails, import the longest importable module prefix and getattr the
rest (what an import statement does). A symbol the code calls must resolve
to something callable. A ``find_spec``
string resolves when ``importlib.util.find_spec`` finds it. The verdicts:

* **in scope**: it resolves;
* **out of scope**: it does not, and ``OUT_OF_SCOPE`` below lists it (or a
  prefix of it) with the reason beam leaves it out. Entries marked
  ``must_be_absent`` are out of scope even if they resolve, and resolving is
  then reported as a violation (no entry uses it since the compiled-graph
  API moved into scope);
* **missing**: neither; beam must grow it.

An option keyword is classified by beam's own ``ray._private.options``
(Ray 2.43's lists and beam's checks): in scope when beam runs it or accepts
it as a no-op for every literal value the code passes; out of scope when
``OUT_OF_SCOPE_OPTIONS`` lists it (the RDT tensor transport) or when beam
refuses a value the code passes (its ``NotImplementedError`` is the
reason); missing when beam's ray does not know it. ``ray.method``
keywords: only those in ``METHOD_OPTIONS`` are in scope, since beam's
``ray.method`` returns the method unchanged.

Output: the three counts, then each missing and out-of-scope symbol with its
first few ``file:line`` locations; ``--json`` prints one JSON document
instead. Exit status: 1 when anything is missing or a must-be-absent name is
present, 0 otherwise, 2 on bad usage. Importing beam's ``ray`` needs no daemon.
"""

import argparse
import ast
import importlib
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field

RDT_REASON = (
    "RDT weight transfer "
    "(vllm/distributed/weight_transfer/sharded_rdt_*.py, vLLM 0.29 on): Ray"
    " Direct Transport moves weights GPU to GPU through NIXL. beam has no "
    "tensor transport, and vLLM itself refuses this backend below Ray 2.56 "
    "(beam reports 2.43.0), so vLLM never reaches these calls on beam; the "
    "default executor path does not use them."
)

# Prefixes beam leaves out on purpose, each with why. A symbol is covered by
# an entry when it equals the entry or continues it with ".". The list is
# decided by what vLLM (0.7 ... 0.34 and main at 239b5ff30) really touches
# outside the Ray paths beam supports (RayExecutorV2, the compiled-graph
# executor, Ray data parallel, config auto-detection).
OUT_OF_SCOPE = [
    {
        "prefix": "ray.serve",
        "reason": "Ray Serve: only vllm/v1/metrics/ray_wrappers.py (the stat "
        "logger for Ray Serve LLM deployments) imports it, inside try/except "
        "ImportError; beam runs no Serve deployments.",
        "must_be_absent": False,
    },
    {
        "prefix": "ray.experimental.register_nixl_memory",
        "reason": RDT_REASON,
        "must_be_absent": False,
    },
    {
        "prefix": "ray.experimental.set_target_for_ref",
        "reason": RDT_REASON,
        "must_be_absent": False,
    },
    {
        "prefix": "ray._private.accelerators.TPUAcceleratorManager",
        "reason": "TPU: get_num_tpu_nodes() in (v1/)executor/ray_utils.py, "
        "called by nothing in vllm/ at 239b5ff30 and, in older releases, only "
        "by the TPU communicator; beam schedules NVIDIA GPUs and CPUs only.",
        "must_be_absent": False,
    },
    {
        "prefix": "ray._private.state.state",
        "reason": "Ray 2.9 fallback in (v1/)executor/ray_utils.py, reached only "
        "when `from ray._private.state import available_resources_per_node` "
        "raises ImportError; beam provides that name, so the branch never runs.",
        "must_be_absent": False,
    },
]


# Option keywords: Ray's names (2.43's ray_option_utils.py and
# ray.method, plus later ones vLLM passes). A keyword of ``.options(...)``
# counts only when it is one of these, in a file that touches ray, so
# unrelated ``.options(...)`` methods are not reported; every keyword of
# ``ray.remote(...)`` and ``ray.method(...)`` counts.
def _ray_option_names():
    """Ray 2.43's option names, from beam's one list of them
    (python/ray/_private/option_names.py, loaded by its path: the ray
    package is not imported for it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(here), "python", "ray", "_private", "option_names.py")
    spec = importlib.util.spec_from_file_location("_beam_option_names", path)
    names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(names)
    return names.COMMON_OPTIONS + names.ACTOR_ONLY_OPTIONS + names.TASK_ONLY_OPTIONS


RAY_OPTION_NAMES = frozenset(
    _ray_option_names()
    + (
        # ray.method
        "concurrency_group",
        # after 2.43
        "enable_tensor_transport",
        "tensor_transport",
        "label_selector",
        "fallback_strategy",
        "allow_out_of_order_execution",
    )
)

# Option keywords beam leaves out on purpose, with why; like OUT_OF_SCOPE,
# these are out of scope whatever beam's ray does with them.
OUT_OF_SCOPE_OPTIONS = {
    "enable_tensor_transport": RDT_REASON,
    "tensor_transport": RDT_REASON,
}

# ``@ray.method(...)`` keywords beam serves: beam's ray.method returns the
# method unchanged, so only a keyword whose effect is nothing (or what beam
# does anyway) is in scope; the value, when given, must be one of these.
METHOD_OPTIONS = {
    "num_returns": (1,),  # a beam method returns one value
    "enable_task_events": None,  # Ray's task-event stream; any value
    "max_task_retries": None,  # beam never restarts an actor, so no retry
}

CONTEXT_DISPLAY = {
    "options": ".options({}=...)",
    "remote": "ray.remote({}=...)",
    "method": "ray.method({}=...)",
}


class _NoLiteral:
    def __repr__(self):
        return "<not a literal>"


NO_LITERAL = _NoLiteral()

MAX_LOCATIONS_SHOWN = 3


@dataclass
class Use:
    """One place the scanned code touches a symbol."""

    path: str
    line: int
    type_only: bool
    called: bool
    value: object = None  # an option's literal value (NO_LITERAL if none)


@dataclass
class Symbol:
    """A distinct symbol: a dotted ray path, or a find_spec string."""

    name: str
    kind: str  # "symbol" or "find_spec"
    uses: list = field(default_factory=list)
    status: str = ""
    reason: str = ""

    @property
    def type_only(self):
        return all(use.type_only for use in self.uses)

    @property
    def called(self):
        return any(use.called for use in self.uses)

    @property
    def display(self):
        return display_name(self.name, self.kind)


def display_name(name, kind):
    if kind == "find_spec":
        return f'find_spec("{name}")'
    if kind == "option":
        context, keyword = name.split(":", 1)
        return CONTEXT_DISPLAY[context].format(keyword)
    return name


def is_ray_path(name):
    return name == "ray" or name.startswith("ray.")


def _is_type_checking_test(test):
    """True for ``if TYPE_CHECKING:`` and ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _dotted(node):
    """``a.b.c`` for a Name/Attribute chain as a list of parts, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


class Tree:
    """The scanned checkout: finds module files and remembers which of them
    do ``import ray`` (for re-exports)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self._imports_ray = {}

    def module_file(self, module, package_dir, level):
        """The file of ``module`` (``from`` level ``level`` in
        ``package_dir``) inside the tree, or None."""
        if level:
            base = package_dir
            for _ in range(level - 1):
                base = os.path.dirname(base)
            bases = [os.path.join(base, *module.split("."))] if module else [base]
        else:
            parts = module.split(".")
            bases = [
                os.path.join(self.root, *parts),
                os.path.join(os.path.dirname(self.root), *parts),
            ]
        for base in bases:
            for candidate in (base + ".py", os.path.join(base, "__init__.py")):
                if os.path.isfile(candidate) and candidate.startswith(self.root + os.sep):
                    return candidate
        return None

    def reexports_ray(self, module, package_dir, level):
        """True when ``from module import ray`` gets Ray's ``ray``: the module
        is a file of the tree that does ``import ray`` and has no ``ray``
        submodule of its own."""
        path = self.module_file(module, package_dir, level)
        if path is None:
            return False
        if os.path.basename(path) == "__init__.py":
            folder = os.path.dirname(path)
            if os.path.exists(os.path.join(folder, "ray.py")) or os.path.isdir(os.path.join(folder, "ray")):
                return False
        if path not in self._imports_ray:
            self._imports_ray[path] = _file_imports_ray(path)
        return self._imports_ray[path]


def _file_imports_ray(path):
    try:
        with open(path, "rb") as handle:
            module = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "ray" and alias.asname in (None, "ray"):
                    return True
    return False


class Scope:
    """Names bound to ray paths in one function, class or module body."""

    def __init__(self, kind):
        self.kind = kind
        self.names = {}  # name -> (ray path, type_only)

    def bind(self, name, path, type_only):
        old = self.names.get(name)
        if old is not None and not old[1]:
            type_only = False  # a runtime binding wins over a type-only one
        self.names[name] = (path, type_only)


class FileScanner(ast.NodeVisitor):
    """Collects the ray symbols one parsed file touches."""

    def __init__(self, tree, path, relpath, record):
        self.tree = tree
        self.path = path
        self.relpath = relpath
        self.record = record  # record(name, kind, Use)
        self.scopes = []
        self.type_only_depth = 0
        self.annotations_deferred = False
        self.line_offset = 0
        self.touches_ray = False

    # -- bindings --------------------------------------------------------

    def _import_bindings(self, node, type_only):
        """Yield (bound name, ray path, symbol, type_only) for an import."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not is_ray_path(alias.name):
                    continue
                if alias.asname:
                    yield alias.asname, alias.name, alias.name, type_only
                else:
                    yield "ray", "ray", alias.name, type_only
            return
        module = node.module or ""
        if node.level == 0 and is_ray_path(module):
            for alias in node.names:
                if alias.name == "*":
                    yield None, None, module, type_only
                    continue
                path = f"{module}.{alias.name}"
                yield alias.asname or alias.name, path, path, type_only
            return
        for alias in node.names:
            if alias.name != "ray":
                continue
            package_dir = os.path.dirname(self.path)
            if self.tree.reexports_ray(module, package_dir, node.level):
                yield alias.asname or "ray", "ray", "ray", type_only

    def _prebind(self, body, scope, type_only=False):
        """Bind the imports of a body before visiting it, so a use that
        precedes the import in the text (a function defined above it) still
        resolves. Nested functions and classes get their own pass."""
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for name, path, _, only in self._import_bindings(stmt, type_only):
                    if name:
                        scope.bind(name, path, only)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            elif isinstance(stmt, ast.If):
                guarded = type_only or _is_type_checking_test(stmt.test)
                self._prebind(stmt.body, scope, guarded)
                self._prebind(stmt.orelse, scope, type_only)
            else:
                for child_body in _child_bodies(stmt):
                    self._prebind(child_body, scope, type_only)

    def _lookup(self, name):
        for index in range(len(self.scopes) - 1, -1, -1):
            scope = self.scopes[index]
            # Class bodies are not visible from the functions inside them.
            if scope.kind == "class" and index != len(self.scopes) - 1:
                continue
            if name in scope.names:
                return scope.names[name]
        return None

    # -- recording -------------------------------------------------------

    def _use(self, node, called=False, type_only=False):
        line = getattr(node, "lineno", 0) + self.line_offset
        return Use(self.relpath, line, type_only or self.type_only_depth > 0, called)

    def _chain(self, node):
        """(ray path, type_only) of a chain on a ray-bound name, else None."""
        parts = _dotted(node)
        if not parts:
            return None
        bound = self._lookup(parts[0])
        if bound is None:
            return None
        path, type_only = bound
        return ".".join([path] + parts[1:]), type_only

    def _record_chain(self, node, called):
        """Record ``node`` if it is a chain on a ray-bound name; True if so."""
        chain = self._chain(node)
        if chain is None:
            return False
        name, type_only = chain
        self.record(name, "symbol", self._use(node, called, type_only))
        return True

    def _record_options(self, node):
        """Record the option keywords of ``ray.remote(...)``,
        ``ray.method(...)`` (also as decorators) and ``X.options(...)``."""
        chain = self._chain(node.func)
        if chain is not None and chain[0] in ("ray.remote", "ray.method"):
            context, every = chain[0].split(".")[1], True
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "options" and self.touches_ray:
            context, every = "options", False
        else:
            return
        for keyword in node.keywords:
            if keyword.arg is None:
                continue  # **kwargs: the scanner cannot see the names
            if not every and keyword.arg not in RAY_OPTION_NAMES:
                continue
            use = self._use(keyword.value)
            try:
                use.value = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                use.value = NO_LITERAL
            self.record(f"{context}:{keyword.arg}", "option", use)

    # -- visitors --------------------------------------------------------

    def visit_Module(self, node):
        self.annotations_deferred = any(
            isinstance(stmt, ast.ImportFrom)
            and stmt.module == "__future__"
            and any(alias.name == "annotations" for alias in stmt.names)
            for stmt in node.body
        )
        scope = Scope("module")
        self._prebind(node.body, scope)
        self.touches_ray = any(
            isinstance(child, (ast.Import, ast.ImportFrom)) and any(True for _ in self._import_bindings(child, False))
            for child in ast.walk(node)
        )
        self.scopes.append(scope)
        self.generic_visit(node)
        self.scopes.pop()

    def _visit_import(self, node):
        for _, _, symbol, type_only in self._import_bindings(node, False):
            self.record(symbol, "symbol", self._use(node, type_only=type_only))

    visit_Import = _visit_import
    visit_ImportFrom = _visit_import

    def visit_If(self, node):
        self.visit(node.test)
        guarded = _is_type_checking_test(node.test)
        self.type_only_depth += guarded
        for stmt in node.body:
            self.visit(stmt)
        self.type_only_depth -= guarded
        for stmt in node.orelse:
            self.visit(stmt)

    def _visit_function(self, node):
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._visit_arguments(node.args)
        if node.returns is not None:
            self._visit_annotation(node.returns)
        scope = Scope("function")
        self._prebind(node.body, scope)
        self.scopes.append(scope)
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def _visit_arguments(self, args):
        every = args.posonlyargs + args.args + args.kwonlyargs
        every += [arg for arg in (args.vararg, args.kwarg) if arg is not None]
        for arg in every:
            if arg.annotation is not None:
                self._visit_annotation(arg.annotation)
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(default)

    def visit_Lambda(self, node):
        self._visit_arguments(node.args)
        self.scopes.append(Scope("function"))
        self.visit(node.body)
        self.scopes.pop()

    def visit_ClassDef(self, node):
        for child in node.decorator_list + node.bases + node.keywords:
            self.visit(child)
        scope = Scope("class")
        self._prebind(node.body, scope)
        self.scopes.append(scope)
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    def visit_AnnAssign(self, node):
        self.visit(node.target)
        # Python never evaluates the annotation of an assignment inside a
        # function body, so such uses are type-only.
        in_function = self.scopes[-1].kind == "function"
        self.type_only_depth += in_function
        self._visit_annotation(node.annotation)
        self.type_only_depth -= in_function
        if node.value is not None:
            self.visit(node.value)

    def _visit_annotation(self, node):
        """Visit an annotation; deferred ones, and the strings inside any
        annotation (``"ray.actor.ActorHandle"``, ``list["X"]``), are
        type-only."""
        deferred = self.annotations_deferred
        self.type_only_depth += deferred
        if not _is_str_constant(node):
            self.visit(node)
        self.type_only_depth -= deferred
        for inner in ast.walk(node):
            if _is_str_constant(inner):
                self._visit_string_annotation(inner)

    def _visit_string_annotation(self, node):
        try:
            parsed = ast.parse(node.value.strip(), mode="eval")
        except SyntaxError:
            return  # e.g. a Literal["..."] value, not a type expression
        saved = self.line_offset
        self.line_offset = node.lineno - 1 + saved
        self.type_only_depth += 1
        self.visit(parsed.body)
        self.type_only_depth -= 1
        self.line_offset = saved

    def visit_Call(self, node):
        spec = _spec_string(node)
        if spec is not None:
            kind, name = spec
            self.record(name, kind, self._use(node))
        self._record_options(node)
        if not self._record_chain(node.func, called=True):
            self.visit(node.func)
        for child in node.args + node.keywords:
            self.visit(child)

    def visit_Attribute(self, node):
        if not self._record_chain(node, called=False):
            self.generic_visit(node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self._record_chain(node, called=False)


def _is_str_constant(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _child_bodies(stmt):
    """The statement lists nested directly in a compound statement."""
    bodies = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(stmt, name, None)
        if isinstance(value, list):
            bodies.append(value)
    for handler in getattr(stmt, "handlers", []):
        bodies.append(handler.body)
    for case in getattr(stmt, "cases", []):
        bodies.append(case.body)
    return bodies


def _spec_string(call):
    """("find_spec"|"symbol", name) for find_spec("ray...") /
    import_module("ray..."), else None."""
    parts = _dotted(call.func)
    if not parts or parts[-1] not in ("find_spec", "import_module", "__import__"):
        return None
    if not call.args:
        return None
    first = call.args[0]
    if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
        return None
    if not is_ray_path(first.value):
        return None
    kind = "find_spec" if parts[-1] == "find_spec" else "symbol"
    return kind, first.value


# -- scanning ---------------------------------------------------------------


# Every way to touch ray names the word: `import ray`, `from ray...`,
# `from pkg import ray`, "ray..." strings. Files without it are counted but
# not parsed, which makes a vLLM tree an order of magnitude faster to scan.
MENTIONS_RAY = re.compile(rb"\bray\b")


def iter_python_files(root):
    """Every .py file under ``root``, sorted, skipping hidden folders and
    __pycache__."""
    for folder, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def scan_tree(root):
    """Scan ``root``; return (symbols by (name, kind), files scanned,
    files touching ray, parse errors)."""
    tree = Tree(root)
    symbols = {}
    files_with_ray = set()
    errors = []
    count = 0

    def record(name, kind, use):
        key = (name, kind)
        if key not in symbols:
            symbols[key] = Symbol(name, kind)
        symbols[key].uses.append(use)
        files_with_ray.add(use.path)

    for path in iter_python_files(tree.root):
        count += 1
        relpath = os.path.relpath(path, tree.root)
        with open(path, "rb") as handle:
            source = handle.read()
        if not MENTIONS_RAY.search(source):
            continue  # no `ray` word: nothing here can touch ray
        try:
            module = ast.parse(source, filename=path)
        except (SyntaxError, ValueError) as err:
            errors.append({"path": relpath, "error": str(err)})
            continue
        FileScanner(tree, path, relpath, record).visit(module)
    return symbols, count, len(files_with_ray), errors


# -- resolving against beam's ray -------------------------------------------


def default_beam_python():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "python")


def prepare_import_path(beam_python, scanned_root):
    """Put beam's python folder first on sys.path and drop entries that
    could import the scanned code instead."""
    scanned = os.path.abspath(scanned_root)
    kept = []
    for entry in sys.path:
        absolute = os.path.abspath(entry or os.getcwd())
        if absolute == scanned or absolute.startswith(scanned + os.sep):
            continue
        if entry in ("", "."):
            continue
        kept.append(entry)
    sys.path[:] = [os.path.abspath(beam_python)] + kept


def _import_failure(err, module):
    """True when ``err`` says ``module`` itself (or a parent) is absent,
    rather than that importing it broke on something else."""
    missing = getattr(err, "name", None)
    return (
        isinstance(err, ModuleNotFoundError)
        and bool(missing)
        and (module == missing or module.startswith(missing + "."))
    )


def resolve_by_attribute(dotted):
    """Resolve ``dotted`` the way an attribute chain runs: import ``ray``,
    then getattr part by part, importing ``a.b`` as a module only when ``a``
    has no attribute ``b`` yet. Returns (object, None) or (None, reason)."""
    parts = dotted.split(".")
    try:
        obj = importlib.import_module(parts[0])
    except Exception as err:
        return None, f"import {parts[0]} failed: {type(err).__name__}: {err}"
    for index in range(1, len(parts)):
        part, owner = parts[index], ".".join(parts[:index])
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            pass
        except Exception as err:
            return None, f"getattr({owner}, {part!r}) raised {err!r}"
        if not isinstance(obj, type(sys)):
            return None, f"{owner} has no attribute {part!r}"
        prefix = f"{owner}.{part}"
        try:
            obj = importlib.import_module(prefix)
        except Exception as err:
            if _import_failure(err, prefix):
                return None, f"{owner} has no attribute or submodule {part!r}"
            return None, f"import {prefix} failed: {type(err).__name__}: {err}"
    return obj, None


def resolve_by_module(dotted):
    """Resolve ``dotted`` the way an import statement does: import the
    longest importable module prefix, then getattr the rest. Returns
    (object, None) or (None, reason)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(prefix)
        except Exception as err:
            if _import_failure(err, prefix):
                continue
            return None, f"import {prefix} failed: {type(err).__name__}: {err}"
        for index in range(cut, len(parts)):
            try:
                obj = getattr(obj, parts[index])
            except Exception:
                owner = ".".join(parts[:index])
                return None, f"{owner} has no attribute {parts[index]!r}"
        return obj, None
    return None, f"no module {parts[0]}"


def resolve(dotted, need_callable=False):
    """Resolve ``dotted`` against the importable ``ray``.

    Tries attribute access first (so ``ray.util.placement_group`` is the
    function ``ray.util`` exports, not the submodule it shadows), then module
    import (so ``ray.util.placement_group.PlacementGroup`` is found in the
    submodule). With ``need_callable`` only a callable result counts.
    Returns (object, None) or (None, reason).
    """
    reason = None
    for strategy in (resolve_by_attribute, resolve_by_module):
        obj, why = strategy(dotted)
        if why is None and need_callable and not callable(obj):
            why = f"the code calls it, but beam's {dotted} is not callable " f"({type(obj).__name__})"
        if why is None:
            return obj, None
        reason = reason or why
    return None, reason


def find_spec_present(name):
    """Whether importlib.util.find_spec(name) finds a module; never raises."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False
    except Exception:
        return False


def out_of_scope_entry(name):
    for entry in OUT_OF_SCOPE:
        prefix = entry["prefix"]
        if name == prefix or name.startswith(prefix + "."):
            return entry
    return None


def _beam_options():
    """beam's ray._private.options (its option lists and checks), or the
    reason it cannot be imported."""
    try:
        return importlib.import_module("ray._private.options"), None
    except Exception as err:
        return None, f"beam's ray has no ray._private.options ({type(err).__name__}: {err})"


def _literal_values(symbol):
    values = []
    for use in symbol.uses:
        if use.value is not NO_LITERAL and use.value not in values:
            values.append(use.value)
    return values


def classify_option(symbol):
    """An option keyword: in scope when beam runs it or accepts it as a
    no-op (python/ray/_private/options.py decides, by running its checks on
    every literal value the code passes); out of scope when listed in
    OUT_OF_SCOPE_OPTIONS or when beam refuses a value the code passes
    (NotImplementedError: beam says no rather than ignore it); missing when
    beam's ray does not know the keyword at all."""
    context, keyword = symbol.name.split(":", 1)
    if keyword in OUT_OF_SCOPE_OPTIONS:
        return "out_of_scope", OUT_OF_SCOPE_OPTIONS[keyword]
    values = _literal_values(symbol)
    if context == "method":
        if keyword not in METHOD_OPTIONS:
            return "missing", (
                f"beam's ray.method ignores {keyword}=; only " f"{', '.join(sorted(METHOD_OPTIONS))} are served"
            )
        allowed = METHOD_OPTIONS[keyword]
        bad = [v for v in values if allowed is not None and v not in allowed]
        if bad:
            return "missing", (
                f"beam's ray.method ignores {keyword}={bad[0]!r}; it serves only "
                f"{', '.join(repr(v) for v in allowed)}"
            )
        return "in_scope", ""
    options, why = _beam_options()
    if options is None:
        return "missing", why
    if keyword in options.ACTOR_OPTIONS:
        check = options.check_actor_options
    elif keyword in options.TASK_OPTIONS:
        check = options.check_task_options
    else:
        return "missing", (
            f"{keyword}= is not an option of Ray 2.43's ray.remote/.options(), "
            f"which beam implements; beam raises ValueError for it"
        )
    for value in values:
        try:
            check({keyword: value})
        except NotImplementedError as err:
            return "out_of_scope", f"beam refuses it: {err}"
        except Exception:
            pass  # Ray refuses that value too; not a gap of beam's
    return "in_scope", ""


def classify(symbol):
    """Set ``symbol.status`` to in_scope / out_of_scope / missing, with a
    reason for the last two."""
    if symbol.kind == "option":
        symbol.status, symbol.reason = classify_option(symbol)
        return
    entry = out_of_scope_entry(symbol.name)
    if entry is not None and entry["must_be_absent"]:
        symbol.status, symbol.reason = "out_of_scope", entry["reason"]
        return
    if symbol.kind == "find_spec":
        ok = find_spec_present(symbol.name)
        reason = None if ok else "importlib.util.find_spec() finds no such module"
    else:
        _, reason = resolve(symbol.name, need_callable=symbol.called)
        ok = reason is None
    if ok:
        symbol.status, symbol.reason = "in_scope", ""
    elif entry is not None:
        symbol.status, symbol.reason = "out_of_scope", entry["reason"]
    else:
        symbol.status, symbol.reason = "missing", reason


def absent_violations():
    """Must-be-absent entries that beam's ray nevertheless provides."""
    return [entry["prefix"] for entry in OUT_OF_SCOPE if entry["must_be_absent"] and find_spec_present(entry["prefix"])]


# -- reporting --------------------------------------------------------------


def build_report(root, symbols, files, files_with_ray, errors, violations):
    ordered = sorted(symbols.values(), key=lambda s: (s.status, s.name, s.kind))
    counts = {"in_scope": 0, "out_of_scope": 0, "missing": 0}
    for symbol in ordered:
        counts[symbol.status] += 1
    return {
        "root": os.path.abspath(root),
        "files_scanned": files,
        "files_touching_ray": files_with_ray,
        "parse_errors": errors,
        "counts": counts,
        "must_be_absent_violations": violations,
        "symbols": [
            {
                "symbol": s.name,
                "kind": s.kind,
                "display": s.display,
                "status": s.status,
                "reason": s.reason,
                "type_only": s.type_only,
                "called": s.called,
                "locations": [{"path": u.path, "line": u.line, "type_only": u.type_only} for u in s.uses],
                **({"values": [repr(v) for v in _literal_values(s)]} if s.kind == "option" else {}),
            }
            for s in ordered
        ],
    }


def _format_locations(symbol):
    shown = [f"{u['path']}:{u['line']}" for u in symbol["locations"][:MAX_LOCATIONS_SHOWN]]
    extra = len(symbol["locations"]) - len(shown)
    text = ", ".join(shown)
    return text + (f" (+{extra} more)" if extra > 0 else "")


def print_text(report, out):
    counts = report["counts"]
    print(
        f"scanned {report['files_scanned']} files under {report['root']}; " f"{report['files_touching_ray']} touch ray",
        file=out,
    )
    print(
        f"in scope: {counts['in_scope']}  out of scope: {counts['out_of_scope']}  " f"missing: {counts['missing']}",
        file=out,
    )
    for status, title in (("missing", "missing"), ("out_of_scope", "out of scope")):
        chosen = [s for s in report["symbols"] if s["status"] == status]
        if not chosen:
            continue
        print(f"\n{title}:", file=out)
        for symbol in chosen:
            name = display_name(symbol["symbol"], symbol["kind"])
            flags = " [type-only]" if symbol["type_only"] else ""
            print(f"  {name}{flags}  {_format_locations(symbol)}", file=out)
            print(f"      {symbol['reason']}", file=out)
    for prefix in report["must_be_absent_violations"]:
        print(f"\nVIOLATION: {prefix} must stay absent from beam but is importable", file=out)
    for error in report["parse_errors"]:
        print(f"warning: could not parse {error['path']}: {error['error']}", file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="List the ray symbols a vLLM checkout uses and check beam provides them."
    )
    parser.add_argument("path", help="a vLLM checkout (or any folder of .py files)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--beam-python",
        default=default_beam_python(),
        help="folder holding beam's ray package (default: <repo>/python)",
    )
    args = parser.parse_args(argv)
    if not os.path.isdir(args.path):
        parser.error(f"not a folder: {args.path}")

    symbols, files, files_with_ray, errors = scan_tree(args.path)
    prepare_import_path(args.beam_python, args.path)
    for symbol in symbols.values():
        classify(symbol)
    violations = absent_violations()
    report = build_report(args.path, symbols, files, files_with_ray, errors, violations)

    try:
        if args.json:
            json.dump(report, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print_text(report, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; that is not an error here.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if report["counts"]["missing"] or violations else 0


if __name__ == "__main__":
    sys.exit(main())
