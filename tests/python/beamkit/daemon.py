# SPDX-License-Identifier: Apache-2.0
"""Starting beamd for a test: Node (one daemon, started and stopped, maybe
started again), Beamd (a lone daemon in a folder of its own, as most tests
want it) and Cluster (a head on 127.0.0.1 and members on 127.0.0.2,
127.0.0.3, ..., each a real beamd with its own socket, pretend GPUs and a
short --node-timeout).

    d = Beamd(num_gpus=4, num_cpus=8)       # ready when it returns
    rc, left = d.close()                    # SIGTERM; leftovers killed; folder gone

    with Cluster(members=2) as c:
        c.head.socket, c.members[0].socket, c.alive_nodes(), c.members[0].kill9() ...

A cluster's teardown stops every daemon and checks that no process started
for any of their sockets (workers, drivers) is left. The executables come
from build/env.sh (BEAM_BEAMD, BEAM_BEAMCTL), which scripts/test.sh sources.
"""

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

from .procs import beam_processes, free_port, kill_all, wait_until

NODE_TIMEOUT = 2.0


def beamd_exe():
    exe = os.environ.get("BEAM_BEAMD")
    if not exe:
        pytest.fail("BEAM_BEAMD is not set: run the tests through scripts/test.sh (it sources build/env.sh)")
    return exe


def beamd_args(socket_path, cpus=4, gpus=2, ip="127.0.0.1", log_level=None, extra=()):
    """beamd's argv for a daemon on socket_path (--log-level only when given)."""
    args = [beamd_exe(), "--socket", socket_path, "--num-gpus", str(gpus), "--num-cpus", str(cpus), "--node-ip", ip]
    if log_level:
        args += ["--log-level", log_level]
    return args + list(extra)


def beamctl_status(socket_path, wrap=(), timeout=10):
    """`beamctl status --json` of the daemon at socket_path."""
    out = subprocess.run(
        [*wrap, os.environ["BEAM_BEAMCTL"], "--socket", socket_path, "status", "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class Node:
    """One beamd. It may be started again (same socket, ip, flags) after it
    stopped; each start's output goes to the same log. env None: the
    daemon inherits this process's environment as it is at each start;
    otherwise a copy of it (or of env) made now, without
    CUDA_VISIBLE_DEVICES unless gpu_ids names them."""

    log_starts = True  # a "--- start N: args" line in the log before each start

    def __init__(
        self,
        node_dir,
        ip="127.0.0.1",
        gpus=2,
        cpus=4,
        cluster_args=(),
        gpu_ids=None,
        extra=(),
        wrap=(),
        env=None,
        log_level="debug",
        name="beamd",
        inherit_env=False,
    ):
        self.name = name
        self.ip = ip
        self.dir = node_dir
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "beamd.sock")
        self.log_path = os.path.join(self.dir, "beamd.log")
        self.args = beamd_args(self.socket, cpus, gpus, ip, log_level, (*cluster_args, *extra))
        self.wrap = list(wrap)  # e.g. ["ip", "netns", "exec", NS]
        if inherit_env:
            self.env = None
        else:
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
            if self.log_starts:
                log.write(f"--- start {self.starts + 1}: {' '.join(self.args)}\n".encode())
                log.flush()
            self.proc = subprocess.Popen(
                self.wrap + self.args + ["--ready-fd", str(w)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(w,),
                env=self.env,
            )
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
        return beamctl_status(self.socket, self.wrap, timeout)

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


class Beamd(Node):
    """A lone beamd started for a test, in a fresh folder under the temp folder (the suite's own in a test run), on
    127.0.0.1 with pretend GPUs; it inherits the test's environment."""

    log_starts = False

    def __init__(self, num_gpus=4, num_cpus=8, extra=()):
        super().__init__(
            tempfile.mkdtemp(prefix="beamt-"), "127.0.0.1", num_gpus, num_cpus, extra=extra, inherit_env=True
        )
        self.start()

    def close(self):
        """Stops it (SIGTERM), kills any process left for its socket and
        removes its folder: (exit status, pids that were left)."""
        rc = self.stop()
        left = beam_processes(self.socket)
        kill_all(left)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc, left

    def check_closed(self):
        """close(), held to a clean exit and nothing left behind."""
        rc, left = self.close()
        assert rc == 0, f"beamd exited with {rc}:\n{self.read_log()[-3000:]}"
        assert not left, f"beam processes left behind: {left}"


@contextlib.contextmanager
def pointed_at(socket_path):
    """BEAM_SOCKET names socket_path (and RAY_ADDRESS is unset) inside the
    block; both are put back after."""
    saved = {k: os.environ.get(k) for k in ("BEAM_SOCKET", "RAY_ADDRESS")}
    os.environ["BEAM_SOCKET"] = socket_path
    os.environ.pop("RAY_ADDRESS", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def resource_args(resources):
    """beamd's --resource flags for {name: amount}."""
    return [a for name, amount in (resources or {}).items() for a in ("--resource", f"{name}={amount}")]


class Cluster:
    """A head on head_ip with a free port and `members` members on the next
    addresses of 127.0.0.x, all with `gpus` pretend GPUs (or member_gpu_ids[i]
    through CUDA_VISIBLE_DEVICES) and --node-timeout `node_timeout`."""

    def __init__(
        self,
        members=1,
        gpus=2,
        cpus=4,
        node_timeout=NODE_TIMEOUT,
        member_gpu_ids=None,
        head_ip="127.0.0.1",
        member_ips=None,
        wrap_head=(),
        wrap_members=None,
        port=None,
        log_level="debug",
        start=True,
    ):
        self.dir = tempfile.mkdtemp(prefix="beamc-")
        os.chmod(self.dir, 0o700)
        self.gpus, self.cpus, self.node_timeout = gpus, cpus, node_timeout
        self.head_ip = head_ip
        self.log_level = log_level
        self.port = port or free_port(head_ip)
        self.token_file = os.path.join(self.dir, "cluster.token")
        self.timeout_args = ["--node-timeout", str(node_timeout)]
        self.head = Node(
            os.path.join(self.dir, "head"),
            head_ip,
            gpus,
            cpus,
            ["--head", "--port", str(self.port), "--token-file", self.token_file, *self.timeout_args],
            wrap=wrap_head,
            log_level=log_level,
            name="head",
        )
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
        name = name or f"member{i}"
        node = Node(
            os.path.join(self.dir, name),
            ip,
            self.gpus if gpus is None else gpus,
            self.cpus,
            [
                "--address",
                f"{self.head_ip}:{self.port}",
                "--token-file",
                token_file or self.token_file,
                *self.timeout_args,
            ],
            gpu_ids=gpu_ids,
            extra=extra,
            wrap=wrap,
            log_level=self.log_level,
            name=name,
        )
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

    def redirect(self, node, address):
        """node (not started) joins address ("host:port") instead of the head."""
        node.args = [a.replace(f"{self.head_ip}:{self.port}", address) for a in node.args]
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
            kill_all(pids)
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


# Every driver's print() writes its line in one write: the driver's log
# thread prints the workers' lines meanwhile (through sys.stdout, as Ray's
# does), and the built-in print writes its pieces one by one, so a line such
# as "PID 123" could come out as "PID(Printer pid=..) to-stdout-1\n 123".
_ONE_WRITE_PRINT = """\
import builtins as _builtins, sys as _sys
def _print(*args, sep=" ", end="\\n", file=None, flush=False):
    f = _sys.stdout if file is None else file
    if f is not None:
        f.write((" " if sep is None else sep).join(map(str, args)) + ("\\n" if end is None else end))
        if flush:
            f.flush()
_builtins.print = _print
"""


def _driver_args(code, env, unset, wrap, names):
    full_env = dict(os.environ)
    for k in unset:
        full_env.pop(k, None)
    full_env.update(env or {})
    prelude = _ONE_WRITE_PRINT + "".join(f"{k} = {v!r}\n" for k, v in (names or {}).items())
    return [*wrap, sys.executable, "-c", prelude + textwrap.dedent(code)], full_env


def run_driver(code, env=None, timeout=60, unset=(), wrap=(), names=None, check=False, cwd=None):
    """Runs code (dedented) as a separate driver process with this
    interpreter, in this process's environment less the variables in unset
    plus env, under the command prefix wrap (e.g. ``ip netns exec NS``),
    with each of names ({name: value}) bound to its value's repr first, in
    the folder cwd (None: this one); returns the CompletedProcess (text).
    check: its exit status must be 0 (else AssertionError with the ends of
    its stdout and stderr)."""
    args, full_env = _driver_args(code, env, unset, wrap, names)
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
    if check:
        assert out.returncode == 0, f"driver exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-4000:]}"
    return out


def start_driver(code, env=None, unset=(), wrap=(), names=None, output=None, stdin=None):
    """run_driver's driver, started and not waited for: the Popen, with
    stdout and stderr text pipes, or both into the file output (a path);
    stdin as Popen takes it (subprocess.PIPE to write to it)."""
    args, full_env = _driver_args(code, env, unset, wrap, names)
    if output is None:
        return subprocess.Popen(
            args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env
        )
    with open(output, "wb") as f:
        return subprocess.Popen(args, stdin=stdin, stdout=f, stderr=subprocess.STDOUT, env=full_env)


@contextlib.contextmanager
def one_ray_for_module(num_cpus, num_gpus=0, resources=None, extra=()):
    """ray.init() once, for a test module's fixture: against a fresh beamd of
    that size (and extra flags) under beam's ray, or a local real Ray of the
    same size under Ray's. Yields the Beamd (None on Ray); at the end beamd
    must have exited cleanly and left no process behind."""
    import ray

    if getattr(ray, "__commit__", "") != "beam":
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources, include_dashboard=False)
        try:
            yield None
        finally:
            ray.shutdown()
        return
    d = Beamd(num_gpus=num_gpus, num_cpus=num_cpus, extra=[*resource_args(resources), *extra])
    try:
        with pointed_at(d.socket):
            ray.init()
            try:
                yield d
            finally:
                ray.shutdown()
    finally:
        d.check_closed()
