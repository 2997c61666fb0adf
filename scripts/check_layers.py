#!/usr/bin/env python3
"""Checks beamd's layers (docs/DESIGN.md, "Layers"): every `#include "x.h"`
in src/ must go to the same layer's modules allowed by the table below, or
to a lower layer, and the include graph among modules must have no cycle; no table
(layer 3) may include a transport (layer 1), though a transport is lower; a module
folder's private header (`internal.h`) may be included only by that folder's files;
and no C file of src/ may pass MAX_LINES lines.
Prints every offence and exits 1 if there is one; --report prints the graph.

A module is a .c/.h pair named by its stem, or a folder of src/ named in
FOLDERS (every file in it, and every header of it, is that module); src/pybeam/ (the extension) and
beamctl (a program of its own on top of `client`) are not checked here."""

import os
import re
import sys

LAYERS = {
    # 0 base
    "codec": 0,
    "decoder": 0,
    "buf": 0,
    "ids": 0,
    "log": 0,
    "gpu": 0,
    "resources": 0,
    "notify": 0,
    "auth": 0,
    "shm": 0,
    "node": 0,
    "protocol": 0,
    "client": 0,
    "fieldspec": 0,
    "spawn": 0,
    # 1 transports
    "outq": 1,
    "conn": 1,
    "link": 1,
    "handshake": 1,
    "heartbeat": 1,
    "server": 1,
    "procs": 1,
    # 2 port
    "port": 2,
    # 3 tables (ordered inside the layer: a table may include those after it)
    "actors": 3,
    "spec": 3,
    "calls": 3,
    "fit": 3,
    "placement": 3,
    "cluster": 3,
    "objects": 3,
    "boards": 3,
    "board": 0,
    # 4 session
    "session": 4,
    "clientmsg": 4,
    # 5 relay
    "relay": 5,
    "intake": 5,
    "shortcut": 5,
    "localresults": 5,
    "localbatch": 5,
    # 6 top
    "dispatch": 6,
    "status": 6,
    "request": 6,
    "beamd": 6,
    "hooks": 6,
}
# Inside one layer, who may include whom (a module may include the ones
# listed after it); anything not listed may include nothing of its own layer.
SAME_LAYER_ORDER = [
    ["actors", "spec", "calls", "fit", "placement", "cluster", "objects", "boards"],
    ["beamd", "hooks", "dispatch", "status", "request"],
    ["server", "conn", "outq"],
    ["link", "handshake", "heartbeat", "outq"],
    [
        "shm",
        "node",
        "board",
        "resources",
        "gpu",
        "client",
        "fieldspec",
        "spawn",
        "codec",
        "decoder",
        "buf",
        "ids",
        "log",
        "auth",
        "protocol",
        "notify",
    ],
    ["session", "clientmsg"],
    ["relay", "intake", "shortcut", "localbatch", "localresults"],
]
OUTSIDE = {"beamctl"}
# Modules that are a folder of src/ (its files share a private header).
FOLDERS = {"actor": "actors"}
PRIVATE = "internal"  # a folder's private header: for that folder's files only
TABLES, TRANSPORTS = 3, 1  # its own program, on top of client

MAX_LINES = 700  # no C file of src/ (the extension's included) longer than this

INC = re.compile(r'^\s*#\s*include\s+"(?:beam/)?([A-Za-z0-9_]+)\.h"', re.M)


def allowed(a, b):
    la, lb = LAYERS[a], LAYERS[b]
    if lb < la:
        return True
    if lb > la:
        return False
    for order in SAME_LAYER_ORDER:
        if a in order and b in order:
            return order.index(b) > order.index(a)
    return False


def graph(src, bad):
    """The include graph by module; a private header included from outside
    its folder is put in bad."""
    folder_of = {}  # a header's stem -> the folder module it belongs to
    for folder, mod in FOLDERS.items():
        for f in os.listdir(os.path.join(src, folder)):
            if f.endswith(".h"):
                folder_of[f.rsplit(".", 1)[0]] = mod
    edges = {}
    for d, _, files in os.walk(src):
        if os.path.basename(d) == "pybeam":
            continue
        folder = FOLDERS.get(os.path.relpath(d, src))
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            mod = folder or f.rsplit(".", 1)[0]
            text = open(os.path.join(d, f), encoding="utf-8").read()
            for inc in INC.findall(text):
                if inc == PRIVATE and not folder:
                    bad.append(f"{f}: includes a folder's private {PRIVATE}.h")
                inc = folder_of.get(inc, inc) if (inc != PRIVATE or folder) else inc
                if inc != mod and inc != PRIVATE:
                    edges.setdefault(mod, set()).add(inc)
            edges.setdefault(mod, set())
    return edges


def cycles(edges):
    found, state, stack = [], {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if m not in edges:
                continue
            if state.get(m) == 1:
                found.append(stack[stack.index(m) :] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n)
    return found


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = []
    edges = graph(os.path.join(root, "src"), bad)
    inc_dir = os.path.join(root, "include", "beam")
    public = {f.rsplit(".", 1)[0] for f in os.listdir(inc_dir)} if os.path.isdir(inc_dir) else set()
    for a in sorted(edges):
        if a in OUTSIDE:
            continue
        if a not in LAYERS:
            bad.append(f"{a}: not in any layer (add it to scripts/check_layers.py and docs/DESIGN.md)")
            continue
        for b in sorted(edges[a]):
            if b not in LAYERS:
                if b not in public:
                    bad.append(f"{a} -> {b}: {b} is in no layer")
            elif not allowed(a, b):
                bad.append(f"{a} (layer {LAYERS[a]}) -> {b} (layer {LAYERS[b]}): climbs")
            elif LAYERS[a] == TABLES and LAYERS[b] == TRANSPORTS:
                bad.append(f"{a} -> {b}: a table never includes a transport (it goes through the node's hooks or ops)")
    for d, _, files in os.walk(os.path.join(root, "src")):
        for f in files:
            if f.endswith(".c"):
                n = sum(1 for _ in open(os.path.join(d, f), encoding="utf-8"))
                if n > MAX_LINES:
                    bad.append(
                        f"{os.path.relpath(os.path.join(d, f), root)}: {n} lines "
                        f"(at most {MAX_LINES}: split it by concern)"
                    )
    for c in cycles({k: v for k, v in edges.items() if k not in OUTSIDE}):
        bad.append("cycle: " + " -> ".join(c))
    if "--report" in sys.argv:
        for a in sorted(edges):
            print(f"{a} [{LAYERS.get(a, '?')}]: {' '.join(sorted(edges[a]))}")
    for line in bad:
        print("layers:", line)
    if bad:
        print(f"layers: {len(bad)} offence(s)")
        return 1
    print(f"layers: src/ includes only downward, no cycle, no C file over {MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
