# SPDX-License-Identifier: Apache-2.0
"""A raw peer for the cluster link (src/link.c): the handshake's MACs and
stream keys from the cluster token, the sending half of the link's
secretstream (libsodium through ctypes), and TCP peers spoken by hand:
RawPeer (frames as they come) and SealedPeer (a member that did the real
handshake and pushes sealed frames)."""

import hashlib
import hmac
import os
import socket

from . import wire

M2H, H2M = b"beam-m2h-v1", b"beam-h2m-v1"  # the two directions' key labels


def read_token(path):
    with open(path) as f:
        return bytes.fromhex(f.read().strip())


def node_mac(token, head_nonce, member_nonce):
    return hmac.new(token, b"beam-node-v1" + head_nonce + member_nonce, hashlib.sha256).digest()


def head_mac(token, member_nonce, head_nonce):
    return hmac.new(token, b"beam-head-v1" + member_nonce + head_nonce, hashlib.sha256).digest()


def stream_key(token, label, head_nonce, member_nonce):
    """One direction's link key, as src/auth.c derives it (BLAKE2b-256 keyed
    with the token)."""
    return hashlib.blake2b(label + head_nonce + member_nonce, digest_size=32, key=token).digest()


class SealedStream:
    """The sending half of a link's libsodium secretstream, through ctypes,
    so a hand-written peer can speak past the handshake."""

    def __init__(self, key):
        import ctypes
        import ctypes.util

        self._c = ctypes
        self._na = ctypes.CDLL(ctypes.util.find_library("sodium") or "libsodium.so.23")
        assert self._na.sodium_init() >= 0
        self._state = ctypes.create_string_buffer(self._na.crypto_secretstream_xchacha20poly1305_statebytes())
        self.header = ctypes.create_string_buffer(24)
        assert self._na.crypto_secretstream_xchacha20poly1305_init_push(self._state, self.header, key) == 0
        self.header = self.header.raw

    def seal_frame(self, obj):
        c = self._c
        body = wire.pack(obj)
        out = c.create_string_buffer(len(body) + 17)
        n = c.c_ulonglong()
        assert (
            self._na.crypto_secretstream_xchacha20poly1305_push(
                self._state, out, c.byref(n), body, c.c_ulonglong(len(body)), None, c.c_ulonglong(0), c.c_ubyte(0)
            )
            == 0
        )
        return n.value.to_bytes(4, "big") + out.raw[: n.value]


class RawPeer(wire.FrameSocket):
    """A TCP connection to a head's node port, spoken by hand."""

    decode_skipped = True

    def __init__(self, ip, port, timeout=5.0):
        super().__init__(socket.create_connection((ip, port), timeout=timeout))

    def authenticate(self, token):
        """The member's side of the handshake, with the right MAC: the
        stream to seal what it sends next."""
        nonce = self.read_frame()[2]["nonce"]
        mine = os.urandom(32)
        tx = SealedStream(stream_key(token, M2H, nonce, mine))
        self.send(wire.push("auth", {"nonce": mine, "mac": node_mac(token, nonce, mine), "stream": tx.header}))
        assert self.read_frame()[1] == "auth_ok"
        return tx


class SealedPeer(RawPeer):
    """A member spoken by hand: the real handshake with the cluster's token,
    then sealed pushes. What the head sends past the handshake is read as
    raw frames (not opened)."""

    decode_skipped = False

    def __init__(self, cluster, timeout=5.0):
        super().__init__(cluster.head_ip, cluster.port, timeout)
        self.tx = self.authenticate(read_token(cluster.token_file))

    def push(self, op, params):
        try:
            self.send(self.tx.seal_frame([wire.MSG_PUSH, op, params]))
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed already: what closed_by_peer checks


def challenge(peer):
    """A fake head's first step on an accepted connection (a FrameSocket):
    sends a challenge; (its nonce, the auth frame's body as it came)."""
    nonce = os.urandom(32)
    peer.send(wire.push("challenge", {"nonce": nonce}))
    return nonce, peer.read_body()
