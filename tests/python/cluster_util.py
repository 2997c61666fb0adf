# SPDX-License-Identifier: Apache-2.0
"""A beam cluster on this machine for the multi-node tests: a head on
127.0.0.1 and members on 127.0.0.2, 127.0.0.3, ..., each a real beamd with
its own socket, pretend GPUs and a short --node-timeout.

    with Cluster(members=2) as c:
        c.head.socket, c.members[0].socket, c.node_ids(), c.kill_member(0) ...

Teardown stops every daemon and checks that no process started for any of
their sockets (workers, drivers) is left.
"""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import beam_processes, wait_until

NODE_TIMEOUT = 2.0


def free_port(ip="127.0.0.1"):
    s = socket.socket()
    try:
        s.bind((ip, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def beamd_exe():
    exe = os.environ.get("BEAM_BEAMD")
    if not exe:
        pytest.fail("BEAM_BEAMD is not set: source build/env.sh (scripts/test.sh does)")
    return exe


class Node:
    """One beamd of the cluster. It may be started again (same socket, ip,
    flags) after it stopped; each start's output goes to the same log."""

    def __init__(self, cluster_dir, name, ip, gpus=2, cpus=4, cluster_args=(), gpu_ids=None, extra=(),
                 wrap=(), env=None, log_level="debug"):
        self.name = name
        self.ip = ip
        self.dir = os.path.join(cluster_dir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "beamd.sock")
        self.log_path = os.path.join(self.dir, "beamd.log")
        self.args = [beamd_exe(), "--socket", self.socket, "--num-gpus", str(gpus), "--num-cpus", str(cpus),
                     "--node-ip", ip, "--log-level", log_level, *cluster_args, *extra]
        self.wrap = list(wrap)  # e.g. ["ip", "netns", "exec", NS]
        self.env = dict(os.environ if env is None else env)
        self.env.pop("CUDA_VISIBLE_DEVICES", None)
        if gpu_ids is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
        self.proc = None
        self.starts = 0
        self.failed_start = False
        self.expect_signal = False  # a test killed it on purpose

    def start(self, wait_ready=True):
        """Starts the daemon; with wait_ready, returns once it says ready (a
        member says so only once its head has welcomed it)."""
        r, w = os.pipe()
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts + 1}: {' '.join(self.args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.wrap + self.args + ["--ready-fd", str(w)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, pass_fds=(w,), env=self.env)
        os.close(w)
        if not wait_ready:
            os.close(r)
            self.starts += 1
            self.failed_start = False
            return self
        with os.fdopen(r, "rb") as ready:
            line = ready.readline()
        self.starts += 1
        self.failed_start = not line.startswith(b"ready")
        if self.failed_start:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            raise RuntimeError(f"beamd {self.name} did not start:\n{self.read_log()[-3000:]}")
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def read_log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def status(self, timeout=10):
        out = subprocess.run(self.wrap + [os.environ["BEAM_BEAMCTL"], "--socket", self.socket, "status", "--json"],
                             capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def kill9(self):
        """SIGKILL, as a crashed machine: the daemon's workers are not told
        (they go on their own: parent-death signal and socket EOF)."""
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=10):
        """SIGTERM and wait; returns the exit status (None if it never ran)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # in case a test left it stopped
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "hung on SIGTERM"
        return self.proc.returncode


class Cluster:
    """A head on head_ip with a free port and `members` members on the next
    addresses of 127.0.0.x, all with `gpus` pretend GPUs (or member_gpu_ids[i]
    through CUDA_VISIBLE_DEVICES) and --node-timeout `node_timeout`."""

    def __init__(self, members=1, gpus=2, cpus=4, node_timeout=NODE_TIMEOUT, member_gpu_ids=None,
                 head_ip="127.0.0.1", member_ips=None, wrap_head=(), wrap_members=None, port=None,
                 log_level="debug", start=True):
        self.dir = tempfile.mkdtemp(prefix="beamc-", dir="/tmp")
        os.chmod(self.dir, 0o700)
        self.gpus, self.cpus, self.node_timeout = gpus, cpus, node_timeout
        self.head_ip = head_ip
        self.log_level = log_level
        self.port = port or free_port(head_ip)
        self.token_file = os.path.join(self.dir, "cluster.token")
        self.timeout_args = ["--node-timeout", str(node_timeout)]
        self.head = Node(self.dir, "head", head_ip, gpus, cpus,
                         ["--head", "--port", str(self.port), "--token-file", self.token_file, *self.timeout_args],
                         wrap=wrap_head, log_level=log_level)
        self.members = []
        self.nodes = [self.head]  # every Node ever made, for teardown
        self._member_ips = member_ips
        self._member_gpu_ids = member_gpu_ids or []
        self._wrap_members = wrap_members or []
        self._next_ip = 2
        self._n = members
        self._closed = False
        atexit.register(self._at_exit)  # a script that dies without close() leaves no daemon
        if start:
            self.start()

    # --- building ---

    def start(self):
        try:
            self.head.start()
            for i in range(self._n):
                self.add_member(wait=False)
            self.wait_alive(1 + self._n)
        except BaseException:
            self.close(check=False)
            raise
        return self

    def _ip(self, i):
        if self._member_ips:
            return self._member_ips[i]
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        return ip

    def member_node(self, ip=None, token_file=None, gpus=None, gpu_ids=None, extra=(), wrap=None, name=None):
        """A member Node, not started."""
        i = len([n for n in self.nodes if n is not self.head])
        ip = ip or self._ip(i)
        if gpu_ids is None and i < len(self._member_gpu_ids):
            gpu_ids = self._member_gpu_ids[i]
        if wrap is None:
            wrap = self._wrap_members[i] if i < len(self._wrap_members) else ()
        node = Node(self.dir, name or f"member{i}", ip, self.gpus if gpus is None else gpus, self.cpus,
                    ["--address", f"{self.head_ip}:{self.port}", "--token-file", token_file or self.token_file,
                     *self.timeout_args], gpu_ids=gpu_ids, extra=extra, wrap=wrap,
                    log_level=self.log_level)
        self.nodes.append(node)
        return node

    def add_member(self, wait=True, **kw):
        """A new member, started; with wait, once the head lists it alive."""
        want = len(self.alive_nodes()) + 1
        node = self.member_node(**kw).start(wait_ready=wait)
        self.members.append(node)
        if wait:
            if not wait_until(lambda: node.ip in self.alive_nodes(), 10, 0.05):
                raise AssertionError(f"{node.name} ({node.ip}) did not join\n" + self.logs())
            self.wait_alive(want)
        return node

    # --- looking ---

    def status(self):
        return self.head.status()

    def node_table(self):
        """The head's nodes: [{node_id, node_ip, alive, ...}]."""
        return self.status()["nodes"]

    def alive_nodes(self):
        """{node_ip: node_id} of the live nodes, as the head sees them."""
        try:
            return {n["node_ip"]: n["node_id"] for n in self.node_table() if n["alive"]}
        except (AssertionError, subprocess.TimeoutExpired, OSError, ValueError):
            return {}

    def node_id(self, node):
        return self.alive_nodes().get(node.ip)

    def wait_alive(self, count, timeout=10):
        if not wait_until(lambda: len(self.alive_nodes()) == count, timeout, 0.05):
            raise AssertionError(f"expected {count} live nodes, have {self.alive_nodes()}\n" + self.logs())
        return self.alive_nodes()

    def wait_dead(self, node_id, timeout):
        def dead():
            try:
                return any(n["node_id"] == node_id and not n["alive"] for n in self.node_table())
            except (AssertionError, subprocess.TimeoutExpired):
                return False

        return wait_until(dead, timeout, 0.05)

    def logs(self, tail=2500):
        return "\n".join(f"=== {n.name} ({n.ip})\n{n.read_log()[-tail:]}" for n in self.nodes)

    # --- breaking ---

    def restart_head(self):
        """The head again: same port, token and socket."""
        self.head.stop()
        self.head.start()
        return self.head

    # --- teardown ---

    def sockets(self):
        return [n.socket for n in self.nodes]

    def leftovers(self):
        return {s: beam_processes(s) for s in self.sockets() if beam_processes(s)}

    def _at_exit(self):
        if not self._closed:
            self.close(check=False)

    def close(self, check=True):
        """Stops the members, then the head; kills and reports any process
        left for any of their sockets. With check, raises if one was left or
        a daemon did not exit 0 on SIGTERM."""
        self._closed = True
        problems = []
        for node in self.nodes[1:] + [self.head]:
            rc = node.stop()
            # a daemon a test killed or stopped itself exits by a signal: only
            # a clean SIGTERM stop is held to 0
            if rc not in (None, 0) and not node.expect_signal and not node.failed_start:
                problems.append(f"{node.name} exited with {rc}")
        # workers leave within a moment of their daemon (EOF on the socket)
        wait_until(lambda: not self.leftovers(), 5, 0.05)
        left = self.leftovers()
        for pids in left.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if left:
            problems.append(f"processes left behind: {left}")
        logs = self.logs() if problems else ""
        shutil.rmtree(self.dir, ignore_errors=True)
        if check and problems:
            raise AssertionError("; ".join(problems) + "\n" + logs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(check=exc[0] is None)
        return False


def driver_env(node, **extra):
    """Environment for run_driver on `node`: RAY_ADDRESS and BEAM_SOCKET name
    its socket (an address with a '/' never starts a private daemon)."""
    env = {"BEAM_SOCKET": node.socket, "RAY_ADDRESS": node.socket}
    env.update(extra)
    return env


@pytest.fixture
def make_cluster(monkeypatch):
    """make_cluster(**Cluster kwargs) -> a started Cluster; the test process's
    own driver is pointed at its head (BEAM_SOCKET) and shut down before the
    daemons stop."""
    made = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def make(**kw):
        c = Cluster(**kw)
        made.append(c)
        monkeypatch.setenv("BEAM_SOCKET", c.head.socket)
        return c

    try:
        yield make
    finally:
        import ray

        ray.shutdown()
        errors = []
        for c in made:
            try:
                c.close()
            except AssertionError as e:
                errors.append(str(e))
        if errors:
            raise AssertionError("\n".join(errors))


@pytest.fixture
def cluster(make_cluster):
    """A head (127.0.0.1) and one member (127.0.0.2), 2 GPUs and 4 CPUs each."""
    return make_cluster()


# --- a raw peer for the cluster link: msgpack by hand (the handshake's few
# shapes), frames, and the handshake's MACs ---

def mp_pack(o):
    import struct

    if o is None:
        return b"\xc0"
    if o is True or o is False:
        return b"\xc3" if o else b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        if 0 <= o < 2 ** 32:
            return b"\xce" + struct.pack(">I", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, str):
        b = o.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(o, (bytes, bytearray)):
        if len(o) < 256:
            return b"\xc4" + bytes([len(o)]) + bytes(o)
        return b"\xc6" + struct.pack(">I", len(o)) + bytes(o)
    if isinstance(o, (list, tuple)):
        head = bytes([0x90 | len(o)]) if len(o) < 16 else b"\xdc" + struct.pack(">H", len(o))
        return head + b"".join(mp_pack(x) for x in o)
    if isinstance(o, dict):
        head = bytes([0x80 | len(o)]) if len(o) < 16 else b"\xde" + struct.pack(">H", len(o))
        return head + b"".join(mp_pack(k) + mp_pack(v) for k, v in o.items())
    raise TypeError(type(o))


def mp_unpack(b, i=0):
    """(value, next index) for the msgpack value at b[i:]."""
    import struct

    t = b[i]
    if t < 0x80:
        return t, i + 1
    if 0x80 <= t <= 0x8F or t in (0xDE, 0xDF):
        if t <= 0x8F:
            n, i = t & 0x0F, i + 1
        elif t == 0xDE:
            n, i = struct.unpack(">H", b[i + 1:i + 3])[0], i + 3
        else:
            n, i = struct.unpack(">I", b[i + 1:i + 5])[0], i + 5
        d = {}
        for _ in range(n):
            k, i = mp_unpack(b, i)
            v, i = mp_unpack(b, i)
            d[k] = v
        return d, i
    if 0x90 <= t <= 0x9F or t in (0xDC, 0xDD):
        if t <= 0x9F:
            n, i = t & 0x0F, i + 1
        elif t == 0xDC:
            n, i = struct.unpack(">H", b[i + 1:i + 3])[0], i + 3
        else:
            n, i = struct.unpack(">I", b[i + 1:i + 5])[0], i + 5
        out = []
        for _ in range(n):
            v, i = mp_unpack(b, i)
            out.append(v)
        return out, i
    if 0xA0 <= t <= 0xBF:
        n = t & 0x1F
        return b[i + 1:i + 1 + n].decode(), i + 1 + n
    if t == 0xC0:
        return None, i + 1
    if t in (0xC2, 0xC3):
        return t == 0xC3, i + 1
    sizes = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
    if t in sizes:
        w = sizes[t]
        n = int.from_bytes(b[i + 1:i + 1 + w], "big")
        raw = bytes(b[i + 1 + w:i + 1 + w + n])
        return (raw if t <= 0xC6 else raw.decode()), i + 1 + w + n
    ints = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if t in ints:
        w = struct.calcsize(ints[t])
        return struct.unpack(ints[t], b[i + 1:i + 1 + w])[0], i + 1 + w
    if t >= 0xE0:
        return t - 256, i + 1
    raise ValueError(f"msgpack type {t:#x} not handled here")


def frame(obj):
    body = mp_pack(obj)
    return len(body).to_bytes(4, "big") + body


def read_token(path):
    with open(path) as f:
        return bytes.fromhex(f.read().strip())


def node_mac(token, head_nonce, member_nonce):
    import hashlib
    import hmac

    return hmac.new(token, b"beam-node-v1" + head_nonce + member_nonce, hashlib.sha256).digest()


def head_mac(token, member_nonce, head_nonce):
    import hashlib
    import hmac

    return hmac.new(token, b"beam-head-v1" + member_nonce + head_nonce, hashlib.sha256).digest()


def stream_key(token, label, head_nonce, member_nonce):
    """One direction's link key, as src/auth.c derives it (BLAKE2b-256 keyed
    with the token)."""
    import hashlib

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
        body = mp_pack(obj)
        out = c.create_string_buffer(len(body) + 17)
        n = c.c_ulonglong()
        assert self._na.crypto_secretstream_xchacha20poly1305_push(
            self._state, out, c.byref(n), body, c.c_ulonglong(len(body)), None, c.c_ulonglong(0), c.c_ubyte(0)) == 0
        return n.value.to_bytes(4, "big") + out.raw[:n.value]


class RawPeer:
    """A TCP connection to a head's node port, spoken by hand."""

    def __init__(self, ip, port, timeout=5.0):
        self.sock = socket.create_connection((ip, port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def push(self, op, params):
        self.send(frame([2, op, params]))

    def read_frame(self, timeout=5.0):
        """The next frame's value; None at EOF (or a reset)."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return mp_unpack(body)[0]
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buf += chunk

    def closed_by_peer(self, timeout=5.0):
        """True once the head closes the connection (EOF or reset) within
        timeout; frames it sends first are skipped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.read_frame(max(0.01, deadline - time.monotonic())) is None:
                    return True
            except socket.timeout:
                return False
            except OSError:
                return True
        return False

    def close(self):
        self.sock.close()
