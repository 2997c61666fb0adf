# SPDX-License-Identifier: Apache-2.0
"""Small checks Ray keeps in ``ray._private.utils``, shared by ray.init and
the option checks, and the peer check of beam's direct sockets (compiled
graphs, direct calls); this module imports nothing of ray."""

import os
import socket
import struct


def validate_namespace(namespace):
    """Ray's ray._private.utils.validate_namespace."""
    if not isinstance(namespace, str):
        raise TypeError("namespace must be None or a string.")
    if namespace == "":
        raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')


def peer_uid_allowed(sock):
    """Whether a unix peer may hand a proof at all: its uid (SO_PEERCRED) is
    this process's or root's, as beamd admits its local clients. TCP peers
    (other nodes) are not checked here; a secret is their only proof."""
    if sock.family != socket.AF_UNIX:
        return True
    try:
        _pid, uid, _gid = struct.unpack(
            "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
    except OSError:
        return False
    return uid in (os.getuid(), 0)


def recv_exact(sock, n, closed):
    """Exactly n bytes from a blocking socket; closed(), an exception, is
    raised if the peer ends first (the direct sockets' handshakes)."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise closed()
        data += chunk
    return bytes(data)
