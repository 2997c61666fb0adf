# SPDX-License-Identifier: Apache-2.0
"""Call signatures, as Ray reads them (Ray keeps its own in
``ray._private.signature``): a remote function's or an actor method's
signature read once, and a call's arguments checked against it at
``.remote()``, where Ray raises the TypeError."""

import collections
import inspect


class CallSig(collections.namedtuple("CallSig", "sig lo hi")):
    """A signature for binding a call's arguments, with its positional
    arity read once: lo..hi positional arguments alone fit (hi may be inf);
    lo is None where keyword-only parameters without a default need
    sig.bind anyway."""


def _arity(sig):
    lo = hi = 0
    for p in sig.parameters.values():
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            hi += 1
            if p.default is inspect.Parameter.empty:
                lo = hi
        elif p.kind is inspect.Parameter.VAR_POSITIONAL:
            hi = float("inf")
        elif p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty:
            return None, None
    return lo, hi


def signature(fn, drop_first):
    """fn's signature for binding a call's arguments (without self/cls when
    drop_first), as a CallSig, or None where it cannot be read."""
    try:
        sig = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if (
        drop_first
        and params
        and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ):
        sig = sig.replace(parameters=params[1:])
    return CallSig(sig, *_arity(sig))


def method_signatures(cls, names, skip=()):
    """name -> signature of each method as it is called through a handle
    (the names in skip left out)."""
    sigs = {}
    for name in names:
        if name in skip:
            continue
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if isinstance(attr, staticmethod):
            sig = signature(attr.__func__, False)
        elif isinstance(attr, classmethod):
            sig = signature(attr.__func__, True)
        elif inspect.isfunction(attr):
            sig = signature(attr, True)
        else:
            sig = None
        if sig is not None:
            sigs[name] = sig
    return sigs


def check_call(sig, args, kwargs):
    """Raises the TypeError Ray raises at .remote() for arguments that do
    not fit the signature. Positional arguments alone fit when their count
    does (what sig.bind would find, without its cost on every call)."""
    if sig is None:
        return
    if not kwargs and sig.lo is not None and sig.lo <= len(args) <= sig.hi:
        return
    sig.sig.bind(*args, **kwargs)
