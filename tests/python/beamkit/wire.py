# SPDX-License-Identifier: Apache-2.0
"""beam's wire by hand: one msgpack codec and the 4-byte length framing
(docs/PROTOCOL.md), with no msgpack package, so tests and corpus scripts can
also write odd or invalid msgpack on purpose.

    pack(v)              compact msgpack, the smallest form of each value
                         (as msgpack-c, and so _beam and beamd, write it)
    pack(v, wide=True)   32-bit forms for every length and 64-bit ints past
                         the fixints: valid, and easy to read in a hex dump
    unpack(b, i)         (value, next offset)
    frame(body)          length prefix + body; message(v) = frame(pack(v))
    request(msgid, op, params)   a request frame [0, msgid, op, params]

FrameSocket reads frames off any stream socket (a unix connection to
beamd, a TCP link, a fake head's accepted connection)."""

import socket
import struct
import time

MSG_REQUEST, MSG_REPLY, MSG_PUSH = 0, 1, 2


class Raw(bytes):
    """Bytes spliced into an encoded value as they are (for invalid msgpack)."""


def _int(v, wide):
    if 0 <= v < 0x80:
        return bytes([v])
    if -32 <= v < 0:
        return struct.pack("b", v)
    if wide:
        return b"\xcf" + struct.pack(">Q", v) if v >= 0 else b"\xd3" + struct.pack(">q", v)
    if v >= 0:
        for tag, fmt, top in ((b"\xcc", ">B", 1 << 8), (b"\xcd", ">H", 1 << 16), (b"\xce", ">I", 1 << 32)):
            if v < top:
                return tag + struct.pack(fmt, v)
        return b"\xcf" + struct.pack(">Q", v)
    for tag, fmt, bottom in ((b"\xd0", ">b", -(1 << 7)), (b"\xd1", ">h", -(1 << 15)), (b"\xd2", ">i", -(1 << 31))):
        if v >= bottom:
            return tag + struct.pack(fmt, v)
    return b"\xd3" + struct.pack(">q", v)


def _head(n, fix, fix_top, tags, wide):
    """The header of a str/bin/array/map of length n: the fix form below
    fix_top (None: none), else the first of tags (8-, 16-, 32-bit; None:
    no such form) that holds n."""
    if wide:
        return tags[2] + struct.pack(">I", n)
    if fix is not None and n < fix_top:
        return bytes([fix | n])
    for tag, fmt, top in zip(tags, (">B", ">H", ">I"), (1 << 8, 1 << 16, 1 << 32)):
        if tag is not None and n < top:
            return tag + struct.pack(fmt, n)
    raise ValueError(f"length {n} does not fit msgpack")


def pack(v, wide=False):
    """msgpack of v: None, bool, int, float, str, bytes, list/tuple, dict, Raw."""
    if isinstance(v, Raw):
        return bytes(v)
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        return _int(v, wide)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        return _head(len(b), 0xA0, 32, (b"\xd9", b"\xda", b"\xdb"), wide) + b
    if isinstance(v, (bytes, bytearray)):
        return _head(len(v), None, 0, (b"\xc4", b"\xc5", b"\xc6"), wide) + bytes(v)
    if isinstance(v, (list, tuple)):
        return _head(len(v), 0x90, 16, (None, b"\xdc", b"\xdd"), wide) + b"".join(pack(x, wide) for x in v)
    if isinstance(v, dict):
        return _head(len(v), 0x80, 16, (None, b"\xde", b"\xdf"), wide) + b"".join(
            pack(k, wide) + pack(x, wide) for k, x in v.items()
        )
    raise TypeError(f"cannot pack {type(v).__name__}")


_WIDTH = {
    0xC4: 1,
    0xC5: 2,
    0xC6: 4,
    0xD9: 1,
    0xDA: 2,
    0xDB: 4,
    0xCC: 1,
    0xCD: 2,
    0xCE: 4,
    0xCF: 8,
    0xD0: 1,
    0xD1: 2,
    0xD2: 4,
    0xD3: 8,
    0xDC: 2,
    0xDD: 4,
    0xDE: 2,
    0xDF: 4,
}


def unpack(b, i=0):
    """(value, next offset) of the msgpack value at b[i:] (no ext types)."""
    c = b[i]
    i += 1
    if c <= 0x7F:
        return c, i
    if c >= 0xE0:
        return c - 256, i
    if c <= 0x8F:
        return _unpack_map(b, i, c & 0x0F)
    if c <= 0x9F:
        return _unpack_array(b, i, c & 0x0F)
    if c <= 0xBF:
        n = c & 0x1F
        return bytes(b[i : i + n]).decode(), i + n
    if c == 0xC0:
        return None, i
    if c in (0xC2, 0xC3):
        return c == 0xC3, i
    if c == 0xCA:
        return struct.unpack(">f", b[i : i + 4])[0], i + 4
    if c == 0xCB:
        return struct.unpack(">d", b[i : i + 8])[0], i + 8
    w = _WIDTH.get(c)
    if w is None:
        raise ValueError(f"msgpack byte {c:#x} is not handled")
    n = int.from_bytes(b[i : i + w], "big", signed=0xD0 <= c <= 0xD3)
    i += w
    if c in (0xC4, 0xC5, 0xC6):
        return bytes(b[i : i + n]), i + n
    if c in (0xD9, 0xDA, 0xDB):
        return bytes(b[i : i + n]).decode(), i + n
    if c in (0xDC, 0xDD):
        return _unpack_array(b, i, n)
    if c in (0xDE, 0xDF):
        return _unpack_map(b, i, n)
    return n, i


def _unpack_array(b, i, n):
    out = []
    for _ in range(n):
        v, i = unpack(b, i)
        out.append(v)
    return out, i


def _unpack_map(b, i, n):
    out = {}
    for _ in range(n):
        k, i = unpack(b, i)
        v, i = unpack(b, i)
        out[k] = v
    return out, i


def frame(body):
    """A frame: 4-byte big-endian length, then the body."""
    return struct.pack(">I", len(body)) + body


def message(value, wide=False):
    """The frame of one msgpack value."""
    return frame(pack(value, wide))


def request(msgid, op, params=None, wide=False):
    """A request frame [0, msgid, op, params]."""
    return message([MSG_REQUEST, msgid, op, {} if params is None else params], wide)


def push(op, params, wide=False):
    """A push frame [2, op, params] (the link's messages)."""
    return message([MSG_PUSH, op, params], wide)


class FrameSocket:
    """Frames off a stream socket: read_body() the next frame's bytes,
    read_frame() its value; None at EOF or a reset."""

    # closed_by_peer decodes the frames it skips (so a frame that is not
    # msgpack, e.g. a sealed one, raises ValueError) when this is True
    decode_skipped = False

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def read_body(self, timeout=None, whole=False):
        """The next frame's body; None at EOF (or a reset); socket.timeout
        if none comes within timeout (None: the socket's own timeout).
        With whole, an EOF in the middle of a frame is an AssertionError."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    return body
            try:
                chunk = self.sock.recv(1 << 20)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                assert not whole or self.buf == b"", f"closed in the middle of a frame ({len(self.buf)} bytes held)"
                return None
            self.buf += chunk

    def read_frame(self, timeout=5.0):
        """The next frame's value; None at EOF (or a reset)."""
        body = self.read_body(timeout)
        return None if body is None else unpack(body)[0]

    def send(self, data):
        self.sock.sendall(data)

    def push(self, op, params):
        self.send(push(op, params))

    def closed_by_peer(self, timeout=5.0):
        """True once the peer closes the connection (EOF or reset) within
        timeout; frames it sends first are skipped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                left = max(0.01, deadline - time.monotonic())
                if (self.read_frame(left) if self.decode_skipped else self.read_body(left)) is None:
                    return True
            except socket.timeout:
                return False
            except OSError:
                return True
        return False

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
