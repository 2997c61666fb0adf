# SPDX-License-Identifier: Apache-2.0
"""include/beam/protocol.h is the one place for the protocol's numbers; the
other copies are checked against it here, so a change on one side that is
not made on the other fails: python/ray's ids, object statuses and resource
unit, and the C sources (beamd's modules and _beam), which must take each
number from the header instead of defining or spelling it again."""

import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(REPO, "include", "beam", "protocol.h")

_DEFINE = re.compile(r"^#define (BEAM_[A-Z0-9_]+) (.+?)\s*(?:/\*.*)?$")
_ENUM = re.compile(r"^\s*(BEAM_[A-Z0-9_]+) = (\d+),")


def _value(text):
    text = text.strip()
    if text.startswith('"'):
        return text.strip('"')
    text = text.strip("()")
    if " << " in text:
        base, shift = text.split(" << ")
        return int(base.rstrip("uU")) << int(shift)
    if re.fullmatch(r"\d+[uU]?", text):
        return int(text.rstrip("uU"))
    return float(text)


def _constants():
    out = {}
    with open(HEADER) as f:
        for line in f:
            m = _DEFINE.match(line) or _ENUM.match(line)
            if m and m.group(1) != "BEAM_PROTOCOL_H":
                out[m.group(1)] = _value(m.group(2))
    return out


P = _constants()


def test_header_parses():
    # the names the copies below are checked against; a rename must show here
    for name in (
        "BEAM_NODE_ID_SIZE",
        "BEAM_JOB_ID_SIZE",
        "BEAM_ACTOR_ID_SIZE",
        "BEAM_OBJECT_ID_SIZE",
        "BEAM_PG_ID_SIZE",
        "BEAM_OBJ_OK",
        "BEAM_OBJ_TASK_ERROR",
        "BEAM_OBJ_ACTOR_DIED",
        "BEAM_OBJ_LOST",
        "BEAM_OBJ_UNSCHEDULABLE",
        "BEAM_OBJ_ACTOR_INIT_FAILED",
        "BEAM_OBJ_ACTOR_UNAVAILABLE",
        "BEAM_OBJ_WORKER_CRASHED",
        "BEAM_RES_UNIT",
        "BEAM_FRAME_HEADER",
        "BEAM_MSG_REQUEST",
        "BEAM_MSG_REPLY",
        "BEAM_MSG_PUSH",
        "BEAM_DEFAULT_MAX_FRAME",
        "BEAM_VERSION",
    ):
        assert name in P, name
    assert P["BEAM_DEFAULT_MAX_FRAME"] == 256 << 20


def test_python_ids_match():
    from ray._private import ids

    assert ids.NodeID.SIZE == P["BEAM_NODE_ID_SIZE"]
    assert ids.JobID.SIZE == P["BEAM_JOB_ID_SIZE"]
    assert ids.ActorID.SIZE == P["BEAM_ACTOR_ID_SIZE"]
    assert ids.PlacementGroupID.SIZE == P["BEAM_PG_ID_SIZE"]


def test_object_ref_takes_the_protocol_size():
    from ray._private.object_ref import ObjectRef

    n = P["BEAM_OBJECT_ID_SIZE"]
    # a ref made from a fresh id is dropped again at once (no runtime needed)
    assert ObjectRef(b"\x01" * n).binary() == b"\x01" * n
    for bad in (n - 1, n + 1):
        with pytest.raises(ValueError):
            ObjectRef(b"\x01" * bad)


def test_node_affinity_takes_the_protocol_size():
    from ray import actor

    n = P["BEAM_NODE_ID_SIZE"]
    assert actor._node_id_bytes("ab" * n) == b"\xab" * n
    with pytest.raises(ValueError):
        actor._node_id_bytes("ab" * (n - 1))


def test_python_statuses_match():
    from ray._private import worker

    assert worker.STATUS_OK == P["BEAM_OBJ_OK"]
    assert worker.STATUS_TASK_ERROR == P["BEAM_OBJ_TASK_ERROR"]
    assert worker.STATUS_ACTOR_DIED == P["BEAM_OBJ_ACTOR_DIED"]
    assert worker.STATUS_LOST == P["BEAM_OBJ_LOST"]
    assert worker.STATUS_UNSCHEDULABLE == P["BEAM_OBJ_UNSCHEDULABLE"]
    assert worker.STATUS_ACTOR_INIT_FAILED == P["BEAM_OBJ_ACTOR_INIT_FAILED"]
    assert worker.STATUS_ACTOR_UNAVAILABLE == P["BEAM_OBJ_ACTOR_UNAVAILABLE"]
    assert worker.STATUS_WORKER_CRASHED == P["BEAM_OBJ_WORKER_CRASHED"]


def test_python_resource_unit_matches():
    from ray._private import ray_option_utils

    assert ray_option_utils.RESOURCE_UNIT_SCALING == P["BEAM_RES_UNIT"]


def _c_files():
    for top in ("src", "include"):
        for root, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                path = os.path.join(root, name)
                if name.endswith((".c", ".h")) and path != HEADER:
                    yield path


def test_no_c_file_defines_a_protocol_constant_again():
    again = []
    for path in _c_files():
        with open(path) as f:
            for no, line in enumerate(f, 1):
                m = _DEFINE.match(line) or _ENUM.match(line)
                if m and m.group(1) in P:
                    again.append(f"{os.path.relpath(path, REPO)}:{no}: {m.group(1)}")
    assert not again, again


def test_pybeam_takes_id_sizes_from_the_header():
    # _beam batches released ids by size: those sizes must be the header's names
    sizes = {str(P["BEAM_OBJECT_ID_SIZE"]), str(P["BEAM_ACTOR_ID_SIZE"]), str(P["BEAM_PG_ID_SIZE"])}
    pybeam = os.path.join(REPO, "src", "pybeam")
    spelled, includes = [], False
    for name in sorted(os.listdir(pybeam)):
        if not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(pybeam, name)) as f:
            text = f.read()
        includes = includes or '#include "beam/protocol.h"' in text
        for no, line in enumerate(text.splitlines(), 1):
            if re.search(r"\bid|rel_", line) and set(re.findall(r"\b\d+\b", line)) & sizes:
                spelled.append(f"{name}:{no}: {line.strip()}")
    assert includes
    assert not spelled, spelled
