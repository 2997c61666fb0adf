# SPDX-License-Identifier: Apache-2.0
"""Ray's `ray` command on beam: start, stop, status, list nodes,
get-auth-token, --version; and the `beamd` / `beamctl` console scripts, which
run the programs installed inside this package (ray/_bin).

`ray start` runs one beamd for this node (the head with --head, a member
with --address) and leaves a session in Ray's temp folder (see
ray._private.node) for ray.init, `ray status` and `ray stop`. The cluster
token is resolved here, in Ray's order, and handed to beamd as --token-file.
"""

import argparse
import datetime
import hashlib
import json
import os
import secrets
import signal
import sys
import time

import ray
from ray._private import node as _node
from ray._private import services, worker

DEFAULT_PORT = 6379
READY_TIMEOUT_S = 60.0

# Ray's `ray start` options with no meaning on beam: accepted, each reported
# as ignored. True: the option takes a value; False: a flag.
IGNORED_START = {
    "--node-name": True,
    "--redis-username": True,
    "--redis-password": True,
    "--redis-shard-ports": True,
    "--object-manager-port": True,
    "--node-manager-port": True,
    "--gcs-server-port": True,
    "--min-worker-port": True,
    "--max-worker-port": True,
    "--worker-port-list": True,
    "--ray-client-server-port": True,
    "--redis-max-memory": True,
    "--include-dashboard": True,
    "--dashboard-host": True,
    "--dashboard-port": True,
    "--dashboard-agent-listen-port": True,
    "--dashboard-agent-grpc-port": True,
    "--dashboard-grpc-port": True,
    "--runtime-env-agent-port": True,
    "--plasma-directory": True,
    "--autoscaling-config": True,
    "--plasma-store-socket-name": True,
    "--raylet-socket-name": True,
    "--storage": True,
    "--system-config": True,
    "--metrics-export-port": True,
    "--tracing-startup-hook": True,
    "--labels": True,
    "--include-log-monitor": True,
    "--log-style": True,
    "--log-color": True,
    "--no-redirect-output": False,
    "--enable-object-reconstruction": False,
    "--no-monitor": False,
    "--ray-debugger-external": False,
    "--disable-usage-stats": False,
    "--verbose": False,
    "-v": False,
}
IGNORED_STOP = {"--grace-period": True, "--verbose": False, "-v": False, "--log-style": True, "--log-color": True}


class UsageError(Exception):
    """A bad command line: printed as click (Ray's CLI) prints it, exit 2."""

    def __init__(self, cmd, msg):
        super().__init__(msg)
        self.cmd = cmd


class Failure(Exception):
    """The command could not do its job: the message, exit 1."""


def say(msg=""):
    print(msg, flush=True)


def warn(msg):
    print(msg, file=sys.stderr, flush=True)


class Parser(argparse.ArgumentParser):
    """argparse with click's error lines (`Error: No such option '--x'.`)."""

    def __init__(self, cmd, **kw):
        super().__init__(prog=f"ray {cmd}".strip(), allow_abbrev=False, **kw)
        self.cmd = cmd

    def error(self, message):
        raise UsageError(self.cmd, message[0].upper() + message[1:] + ".")


def split_ignored(cmd, argv, ignored):
    """Takes Ray's meaningless options out of argv: (rest, [ignored option names])."""
    rest, dropped = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in ignored:
            dropped.append(name)
            if ignored[name] and "=" not in arg:
                if i + 1 >= len(argv):
                    raise UsageError(cmd, f"Option '{name}' requires an argument.")
                i += 1
        else:
            rest.append(arg)
        i += 1
    return rest, dropped


def parse(parser, argv):
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        bad = unknown[0]
        if bad.startswith("-"):
            raise UsageError(parser.cmd, f"No such option '{bad.split('=', 1)[0]}'.")
        raise UsageError(parser.cmd, f"Got unexpected extra argument ({bad})")
    return args


# --- the cluster token, in Ray's order ------------------------------------


def default_token_path():
    return os.path.join(os.path.expanduser("~"), ".ray", "auth_token")


def check_auth_mode():
    mode = os.environ.get("RAY_AUTH_MODE", "")
    if mode in ("", "token"):
        return
    if mode == "disabled":
        raise Failure(
            "RAY_AUTH_MODE=disabled is refused: beam never runs a cluster without authentication. Every "
            "node proves it holds the cluster token before anything else is read (Ray's own default was "
            "unauthenticated until late 2025, and the ShadowRay campaigns ran code on such clusters). "
            "Unset RAY_AUTH_MODE or set it to 'token'."
        )
    raise Failure(f"RAY_AUTH_MODE={mode!r} is not supported by beam: use 'token' (or leave it unset).")


def find_token(token_file=None):
    """(token text, where it came from) in Ray's order: --token-file (beam's
    override), $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token; or
    (None, default path) when there is none."""
    if token_file:
        return read_token_file(token_file, "--token-file"), token_file
    env = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if env:
        return env, "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        # as Ray: a named file that cannot be read is an error, not a fallback
        return read_token_file(path, "RAY_AUTH_TOKEN_PATH"), path
    path = default_token_path()
    if os.path.exists(path):
        return read_token_file(path, "the default token file"), path
    return None, path


def read_token_file(path, what):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError as e:
        raise Failure(f"cannot read the cluster token from {path} ({what}): {e.strerror}") from None
    if not text:
        raise Failure(f"the cluster token file {path} ({what}) is empty")
    return text


def create_token(path):
    """A new random token at path, mode 0600 (its folder 0700 when made)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    token = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def beamd_token(token):
    """beamd's token form (64 hex digits): the token itself when it is one,
    else its SHA-256, so any token string Ray accepts works on every node."""
    t = token.strip()
    if len(t) == 64 and all(c in "0123456789abcdefABCDEF" for c in t):
        return t.lower()
    return hashlib.sha256(t.encode()).hexdigest()


# --- ray start ------------------------------------------------------------


def start_parser():
    p = Parser("start", add_help=True)
    p.add_argument("--head", action="store_true")
    p.add_argument("--address")
    p.add_argument("--port", type=int)
    p.add_argument("--node-ip-address")
    p.add_argument("--num-cpus", type=int)
    p.add_argument("--num-gpus", type=int)
    p.add_argument("--memory", type=int)
    p.add_argument("--object-store-memory", type=int)
    p.add_argument("--resources")
    p.add_argument("--block", action="store_true")
    p.add_argument("--temp-dir")
    p.add_argument("--token-file", help="beam: the cluster token file (overrides RAY_AUTH_TOKEN*)")
    return p


def cmd_start(argv):
    argv, ignored = split_ignored("start", argv, IGNORED_START)
    a = parse(start_parser(), argv)
    for name in ignored:
        warn(f"beam: ignoring {name} (Ray's option has no meaning on beam)")
    if a.head == bool(a.address):
        if a.head:
            raise UsageError("start", "--head and --address are exclusive.")
        raise Failure("`--address` is a required flag unless starting a head node with `--head`.")
    if a.port is not None and not 0 < a.port < 65536:
        raise UsageError("start", f"Invalid value for '--port': {a.port} is not a valid port.")
    for name, v in (
        ("--num-cpus", a.num_cpus),
        ("--num-gpus", a.num_gpus),
        ("--memory", a.memory),
        ("--object-store-memory", a.object_store_memory),
    ):
        if v is not None and v < 0:
            raise UsageError("start", f"Invalid value for '{name}': {v} is negative.")
    resources = {}
    if a.resources:
        try:
            resources = json.loads(a.resources)
        except ValueError as e:
            raise Failure(f"--resources must be a JSON object of resource: quantity ({e})") from None
        if not isinstance(resources, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in resources.values()
        ):
            raise Failure("--resources must be a JSON object of resource: quantity (non-negative numbers)")
        for k in ("CPU", "GPU"):
            if k in resources:
                raise Failure(f"Use the '--num-{k.lower()}s' command line argument instead of '{k}' in --resources.")
    check_auth_mode()

    # the session's folder goes in --temp-dir; what finds it (beam_node.json,
    # ray_current_cluster) always in Ray's default temp folder, where
    # ray.init and `ray stop` look
    info_root = _node.ray_temp_dir()
    temp_root = os.path.abspath(a.temp_dir) if a.temp_dir else info_root
    own_folder(info_root)
    own_folder(temp_root)
    try:
        running = _node.running_here(info_root)
    except _node.SessionRefused as e:
        raise Failure(str(e)) from None
    if running:
        raise Failure(running)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S_%f")
    session_dir = os.path.join(temp_root, f"session_{stamp}_{os.getpid()}")
    os.makedirs(session_dir, mode=0o700)
    latest = os.path.join(temp_root, "session_latest")
    try:
        if os.path.islink(latest):
            os.unlink(latest)
        os.symlink(session_dir, latest)
    except OSError:
        pass
    sock = os.path.join(session_dir, "beamd.sock")
    log_path = os.path.join(session_dir, "beamd.log")

    token, source = find_token(a.token_file)
    made_token = False
    if token is None:
        if a.address:
            raise Failure(
                "no cluster token on this node: copy the head's token to ~/.ray/auth_token here, or set "
                "RAY_AUTH_TOKEN (its text) or RAY_AUTH_TOKEN_PATH (a file holding it). `ray get-auth-token` "
                "on the head prints it."
            )
        token = create_token(source)
        made_token = True
    token_path = os.path.join(session_dir, "cluster.token")
    _node.write_atomic(token_path, beamd_token(token) + "\n", 0o600)

    exe = _node.program_path("beamd")
    if not exe:
        raise Failure("beamd was not found (it is installed inside the ray package, ray/_bin; or set BEAM_BEAMD)")
    args = [exe, "--socket", sock, "--token-file", token_path, "--log-level", "info"]
    listen_ip = None
    ip = a.node_ip_address
    if a.head:
        port = a.port if a.port is not None else DEFAULT_PORT
        args += ["--head", "--port", str(port)]
        if ip in ("0.0.0.0", "::"):
            listen_ip, ip = ip, None  # listen on every address, advertise the routable one
            args += ["--listen-ip", listen_ip]
    else:
        host, _, hport = a.address.rpartition(":")
        if not host or not hport.isdigit():
            raise Failure(f"--address must be HOST:PORT, got {a.address!r}")
        args += ["--address", a.address]
        if not ip:
            ip = services.route_ip_to(host.strip("[]"), hport)
    if ip:
        args += ["--node-ip", ip]
    if a.num_cpus is not None:
        args += ["--num-cpus", str(a.num_cpus)]
    if a.num_gpus is not None:
        args += ["--num-gpus", str(a.num_gpus)]
    if a.memory is not None:
        args += ["--memory", str(a.memory)]
    if a.object_store_memory is not None:
        args += ["--object-store-memory", str(a.object_store_memory)]
    for name, amount in resources.items():
        args += ["--resource", f"{name}={amount}"]
    if a.block:
        args += ["--exit-with-parent"]

    t0 = time.monotonic()

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    saved = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        proc = _node.start_daemon(args, log_path, READY_TIMEOUT_S, own_group=not a.block)
    except _node.DaemonStartFailed as e:
        what = "join the cluster at " + a.address if a.address else "start"
        raise Failure(f"beamd did not {what} ({e.why}); its log ({log_path}):\n{e.log_tail}") from None
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    ready_s = time.monotonic() - t0

    hello, _ = _node.daemon_hello(sock, status=False)
    node_ip = hello.get("node_ip") or ip or "127.0.0.1"
    cluster = f"{node_ip}:{port}" if a.head else a.address
    sess = {
        "pid": proc.pid,
        "socket": sock,
        "cluster": cluster,
        "head": bool(a.head),
        "node_ip": node_ip,
        "listen_ip": listen_ip,
        "session_dir": session_dir,
        "log": log_path,
        "token_file": token_path,
        "block_pid": os.getpid() if a.block else None,
        "temp_dir": temp_root,
        "ready_s": round(ready_s, 3),
    }
    _node.write_session(info_root, sess)
    if temp_root != info_root:
        _node.write_atomic(_node.session_paths(temp_root)[1], cluster)

    say(f"Local node IP: {node_ip}")
    say()
    say("-" * 20)
    say("Ray runtime started.")
    say("-" * 20)
    say()
    if a.head:
        say("Next steps")
        say("  To add another node to this Ray cluster, run")
        say(f"    ray start --address='{cluster}'")
        if made_token:
            say(f"  (beam: created the cluster token at {source} (mode 0600); copy it to ~/.ray/auth_token on")
            say("   each node first, or set RAY_AUTH_TOKEN there to its text: `ray get-auth-token` prints it)")
        elif source == "RAY_AUTH_TOKEN":
            say("  (beam: with the same RAY_AUTH_TOKEN set there)")
        else:
            say(
                f"  (beam: with the cluster token of {source} there, at ~/.ray/auth_token or named by "
                "RAY_AUTH_TOKEN_PATH)"
            )
        say()
        say("  To connect to this Ray cluster:")
        say("    import ray")
        say("    ray.init()")
        say()
        say("  To terminate the Ray runtime, run")
        say("    ray stop")
        say()
        say("  To view the status of the cluster, use")
        say("    ray status")
    else:
        say("To terminate the Ray runtime, run")
        say("  ray stop")
    say(f"(beam: beamd pid {proc.pid} ready in {ready_s:.2f} s, serving {sock}; log {log_path})")
    if not a.block:
        return 0
    return block(proc, info_root)


def own_folder(path):
    """Makes path (mode 0700) or checks the one there is this user's (or
    root's and writable by this user, as a shared sticky /tmp/ray): Failure,
    with what to do, for another user's or one this user cannot write."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        _node.trusted_path(path, "Ray's temp folder", kind="folder")
    except _node.SessionRefused as e:
        raise Failure(str(e)) from None
    except OSError as e:
        raise Failure(f"cannot use {path} as Ray's temp folder: {e.strerror}. {_node.TEMP_ADVICE}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        st = os.stat(path)
        raise Failure(
            f"cannot use {path} as Ray's temp folder: it belongs to uid {st.st_uid} and you (uid "
            f"{os.getuid()}) may not write it. {_node.TEMP_ADVICE}"
        )


def block(proc, temp_root):
    say()
    say("--block")
    say("  This command will now block forever until terminated by a signal.")
    say(
        "  Running subprocesses are monitored and a message will be printed if any of them terminate "
        "unexpectedly. Subprocesses exit with SIGTERM will be treated as graceful, thus NOT reported."
    )

    def forward(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, forward)
    while True:
        try:
            rc = proc.wait()
            break
        except InterruptedError:
            continue
    _node.remove_session(temp_root, proc.pid)
    if rc in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
        return 0
    say()
    warn("Some Ray subprocesses exited unexpectedly:")
    warn(f"  beamd [exit code={rc}]")
    return 1


# --- ray stop -------------------------------------------------------------


def descendants(pid, uid=None):
    """Every process under pid (by parent links in /proc); with uid, only
    those running as uid (and what is under them)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if uid is None or _node.pid_uid(c) == uid:
                out.append(c)
                todo.append(c)
    return out


def is_our_beamd(pid, sock):
    """Whether pid is a beamd serving sock that runs as this user."""
    if _node.pid_uid(pid) != os.getuid():
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return sock.encode() in f.read().split(b"\0")
    except OSError:
        return False


def cmd_stop(argv):
    argv, ignored = split_ignored("stop", argv, IGNORED_STOP)
    p = Parser("stop")
    p.add_argument("-f", "--force", action="store_true")
    a = parse(p, argv)
    for name in ignored:
        warn(f"beam: ignoring {name} (Ray's option has no meaning on beam)")
    temp_root = _node.ray_temp_dir()
    try:
        sess = _node.load_session(temp_root)
    except _node.SessionRefused as e:
        warn(f"{e} `ray stop` stops only your own processes: left alone.")
        sess = None
    pid = sess["pid"] if sess else None
    if not pid or not _node.pid_alive(pid) or not is_our_beamd(pid, sess["socket"]):
        if sess:
            _node.remove_session(temp_root, pid)
        say("Did not find any active Ray processes.")
        return 0
    me = os.getuid()
    procs = [pid] + descendants(pid, uid=me)
    blocker = sess.get("block_pid")
    if not isinstance(blocker, int) or isinstance(blocker, bool) or _node.pid_uid(blocker) != me:
        blocker = None
    if blocker and _node.pid_alive(blocker) and blocker not in procs:
        procs.append(blocker)
    sig = signal.SIGKILL if a.force else signal.SIGTERM
    for q in [pid] if not a.force else procs:
        try:
            os.kill(q, sig)
        except (ProcessLookupError, PermissionError):  # gone, or its pid taken by another user's
            pass
    deadline = time.monotonic() + 16.0  # Ray's default --grace-period
    while time.monotonic() < deadline and any(_node.pid_alive(q) for q in procs):
        time.sleep(0.05)
    left = [q for q in procs if _node.pid_alive(q)]
    for q in left:
        try:
            os.kill(q, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # gone, or its pid taken by another user's
            pass
    _node.remove_session(temp_root, pid)
    if left:
        warn(f"beam: {len(left)} process(es) did not stop within 16 s and were killed: " + ", ".join(map(str, left)))
    workers = len(procs) - 1 - (1 if blocker in procs else 0)
    what = f"beamd (pid {pid}) of the cluster at {sess.get('cluster')}, {workers} worker process(es)"
    if blocker in procs:
        what += f" and the blocking `ray start` (pid {blocker})"
    say(f"beam: stopped {what}")
    say(f"Stopped all {len(procs)} Ray processes.")
    return 0


# --- ray status / list nodes ----------------------------------------------

NO_CLUSTER = (
    "Could not find any running Ray instance. Please specify the one to connect to by setting "
    "`--address` flag or `RAY_ADDRESS` environment variable."
)


def find_socket(address):
    """This node's daemon, found as ray.init finds it."""
    try:
        path, _ = worker._resolve_address(address or None)
    except ConnectionError as e:
        raise Failure(str(e)) from None
    if not path or not _node.socket_answers(path):
        raise Failure(f"ConnectionError: {NO_CLUSTER}")
    return path


def format_memory(b):
    for suffix, unit in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= unit:
            return f"{b / unit:.2f}{suffix}"
    return f"{int(b)}B"


def status_nodes(st):
    return st.get("nodes") or [st]


def format_status(st, now=None):
    """`ray status` as Ray 2.43 prints it (autoscaler's format_info_string)."""
    now = now or datetime.datetime.now()
    nodes = status_nodes(st)
    alive = [n for n in nodes if n.get("alive", True)]
    dead = [n for n in nodes if not n.get("alive", True)]
    line = "-" * 63
    out = [f"======== Autoscaler status: {now} ========", "Node status", line, "Active:"]
    out += [f" 1 node_{n['node_id']}" for n in alive] or [" (no active nodes)"]
    out += ["Pending:", " (no pending nodes)", "Recent failures:"]
    out += [f" node_{n['node_id']}: NodeTerminated (ip: {n.get('node_ip', '')})" for n in dead] or [" (no failures)"]
    total, avail = {}, {}
    for n in alive:
        for k, v in n.get("resources_total", {}).items():
            total[k] = total.get(k, 0.0) + v
        for k, v in n.get("resources_available", {}).items():
            avail[k] = avail.get(k, 0.0) + v
    out += ["", "Resources", line, "Usage:"]
    for k in sorted(total):
        if k.startswith("node:"):
            continue
        used = max(0.0, total[k] - avail.get(k, 0.0))
        if k in ("memory", "object_store_memory"):
            out.append(f" {format_memory(used)}/{format_memory(total[k])} {k}")
        else:
            out.append(f" {float(used)}/{float(total[k])} {k}")
    out += ["", "Demands:", " (no resource demands)"]
    return "\n".join(out)


def cmd_status(argv):
    p = Parser("status")
    p.add_argument("--address")
    p.add_argument("-v", "--verbose", action="store_true")
    a = parse(p, argv)
    say(format_status(_node.daemon_status(find_socket(a.address))))
    return 0


def cmd_list(argv):
    p = Parser("list")
    p.add_argument("resource")
    p.add_argument("--address")
    p.add_argument("--format", default="default", choices=["default", "json", "yaml", "table"])
    p.add_argument("--detail", action="store_true")
    a = parse(p, argv)
    if a.resource != "nodes":
        raise Failure(
            f"beam's `ray list` lists nodes only (got {a.resource!r}); `beamctl status` shows actors, "
            "placement groups and objects."
        )
    st = _node.daemon_status(find_socket(a.address))
    rows = []
    for n in status_nodes(st):
        alive = n.get("alive", True)
        rows.append(
            {
                "node_id": n["node_id"],
                "node_ip": n.get("node_ip", ""),
                "is_head_node": bool(n.get("is_head")),
                "state": "ALIVE" if alive else "DEAD",
                "node_name": n.get("node_ip", ""),
                "resources_total": {k: v for k, v in n.get("resources_total", {}).items()} if alive else {},
            }
        )
    if a.format == "json":
        say(json.dumps(rows, indent=2))
        return 0
    say("")
    say("======== List: {} ========".format(datetime.datetime.now()))
    say("Stats:")
    say("------------------------------")
    say(f"Total: {len(rows)}")
    say("")
    say("Table:")
    say("------------------------------")
    head = ["", "NODE_ID", "NODE_IP", "IS_HEAD_NODE", "STATE", "NODE_NAME", "RESOURCES_TOTAL"]
    table = [
        [
            str(i),
            r["node_id"],
            r["node_ip"],
            str(r["is_head_node"]),
            r["state"],
            r["node_name"],
            ", ".join(f"{k}: {v}" for k, v in sorted(r["resources_total"].items()) if not k.startswith("node:")),
        ]
        for i, r in enumerate(rows)
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    for row in [head] + table:
        say("  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip())
    return 0


# --- ray get-auth-token ---------------------------------------------------


def cmd_get_auth_token(argv):
    p = Parser("get-auth-token")
    p.add_argument("--generate", action="store_true")
    a = parse(p, argv)
    token, source = find_token()
    if token is None:
        if not a.generate:
            raise Failure(
                f"No authentication token found (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, {source}). "
                "Run `ray get-auth-token --generate` to make one."
            )
        token = create_token(source)
        warn(f"beam: created the cluster token at {source} (mode 0600)")
    say(token)
    return 0


# --- entry points ---------------------------------------------------------

COMMANDS = {
    "start": cmd_start,
    "stop": cmd_stop,
    "status": cmd_status,
    "list": cmd_list,
    "get-auth-token": cmd_get_auth_token,
}

USAGE = """Usage: ray [OPTIONS] COMMAND [ARGS]...

  beam's `ray` command: Ray's cluster commands, run on beamd.

Options:
  --version  Show the version and exit.
  --help     Show this message and exit.

Commands:
  start           Start Ray processes (beamd) on this node.
  stop            Stop the Ray processes `ray start` started on this node.
  status          Print cluster status, with resource usage.
  list            List nodes: `ray list nodes`.
  get-auth-token  Print (or --generate) the cluster token."""


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        say(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        say(f"ray, version {ray.__version__}")
        return 0
    cmd = argv[0]
    try:
        if cmd not in COMMANDS:
            raise UsageError("", f"No such command '{cmd}'.")
        return COMMANDS[cmd](argv[1:])
    except UsageError as e:
        name = f"ray {e.cmd}".strip()
        warn(f"Usage: {name} [OPTIONS]{' COMMAND [ARGS]...' if not e.cmd else ''}")
        warn(f"Try '{name} --help' for help.")
        warn("")
        warn(f"Error: {e}")
        return 2
    except Failure as e:
        warn(str(e))
        return 1


def _exec(name):
    exe = _node.program_path(name, search_path=False)
    if not exe:
        sys.stderr.write(f"{name}: not found inside the ray package (ray/_bin)\n")
        return 127
    os.execv(exe, [exe] + sys.argv[1:])


def beamd_main():
    return _exec("beamd")


def beamctl_main():
    return _exec("beamctl")


if __name__ == "__main__":
    sys.exit(main())
