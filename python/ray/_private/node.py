# SPDX-License-Identifier: Apache-2.0
"""Finding a beamd, and starting a private one for a driver that found none.

A private daemon lives as long as its driver: it is started with
``--exit-with-parent`` and stopped by ``ray.shutdown()`` (or at exit).
"""

import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time


def program_path(name, search_path=True):
    """Where beam's program `name` (beamd or beamctl) is: $BEAM_BEAMD /
    $BEAM_BEAMCTL, else inside this package (ray/_bin, where a pip install
    puts it), else beside the _beam extension (a build tree), else on PATH."""
    env = os.environ.get("BEAM_" + name.upper())
    if env:
        return env
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cands = [os.path.join(here, "_bin", name)]
    try:  # here, in a try: finding a program needs no _beam extension
        import _beam

        ext = os.path.dirname(os.path.abspath(_beam.__file__))
        cands += [os.path.join(ext, "..", name), os.path.join(ext, name)]
    except ImportError:
        pass
    for cand in cands:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.normpath(cand)
    return shutil.which(name) if search_path else None


def beamd_path():
    return program_path("beamd")


def socket_answers(path):
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class DaemonStartFailed(Exception):
    """beamd did not say it was ready: ``why`` says how ("did not start in
    30 s", "exit status 1", "interrupted"), ``log_tail`` the end of its log."""

    def __init__(self, why, log_tail, timed_out=False):
        super().__init__(why)
        self.why = why
        self.log_tail = log_tail
        self.timed_out = timed_out


def _own_group():
    """Popen's arguments for a process group of its own in the caller's
    session, as ``ray start`` leaves Ray's raylet: ^C at the terminal does not
    reach it, and its workers share the session's scheduling group (autogroup)
    with drivers started from the same session, as on Ray."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}


def start_daemon(args, log_path, timeout, own_group=False):
    """Starts beamd with ``args`` (``--ready-fd`` is added here), its stdout
    and stderr appended to log_path, and waits up to timeout seconds for the
    "ready" line it writes once it serves (a member: once it has joined).
    Returns the Popen. When it does not say ready (it exits, writes anything
    else, the time runs out, or KeyboardInterrupt comes while waiting) it is
    stopped and DaemonStartFailed raised: no daemon is left behind. Used by
    ray.init's private daemon and by ``ray start``."""
    r, w = os.pipe()
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                args + ["--ready-fd", str(w)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(w,),
                close_fds=True,
                **(_own_group() if own_group else {}),
            )
    finally:
        os.close(w)
    try:
        try:
            why = _wait_ready(r, proc, timeout)
        except KeyboardInterrupt:
            why = "interrupted"
    except BaseException:
        stop_process(proc)
        raise
    finally:
        os.close(r)
    if why is None:
        return proc
    stop_process(proc)
    with open(log_path, "rb") as f:
        tail = f.read()[-3000:].decode(errors="replace")
    raise DaemonStartFailed(why, tail, timed_out=why.startswith("did not start in"))


def _wait_ready(fd, proc, timeout):
    """None once beamd wrote "ready" on fd; else why it did not."""
    deadline = time.monotonic() + timeout
    got = b""
    while b"\n" not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"did not start in {timeout:.0f} s"
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(fd, 64)
            if not chunk:
                break
            got += chunk
        elif proc.poll() is not None:
            break
    if got.startswith(b"ready"):
        return None
    try:
        return f"exit status {proc.wait(timeout=5)}"
    except subprocess.TimeoutExpired:
        return f"it said {got!r} instead of ready"


def stop_process(proc, timeout=10.0):
    """SIGTERM, then SIGKILL after timeout seconds; returns once it exited."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class PrivateDaemon:
    """A beamd started for one driver."""

    START_TIMEOUT_S = 30.0

    def __init__(self, num_cpus=None, num_gpus=None, resources=None, extra_args=()):
        exe = beamd_path()
        if not exe:
            raise ConnectionError(
                "beam: no beamd is running and none could be started: beamd was not found "
                "(set BEAM_BEAMD or put beamd on PATH)"
            )
        base = os.path.join(tempfile.gettempdir(), f"beam-{os.getuid()}")
        os.makedirs(base, mode=0o700, exist_ok=True)
        trusted_path(base, "the private daemons' folder", kind="folder")  # not one another user made
        self.dir = tempfile.mkdtemp(prefix=f"driver-{os.getpid()}-", dir=base)
        self.socket = os.path.join(self.dir, "beamd.sock")
        self.log_path = os.path.join(self.dir, "beamd.log")
        args = [exe, "--socket", self.socket, "--exit-with-parent", "--log-level", "warn"]
        if num_cpus is not None:
            args += ["--num-cpus", str(num_cpus)]
        if num_gpus is not None:
            args += ["--num-gpus", str(int(num_gpus))]
        for name, amount in (resources or {}).items():
            args += ["--resource", f"{name}={amount}"]
        args += list(extra_args)
        try:
            self.proc = start_daemon(args, self.log_path, self.START_TIMEOUT_S)
        except DaemonStartFailed as e:
            shutil.rmtree(self.dir, ignore_errors=True)
            if e.timed_out:
                raise ConnectionError(f"beam: the private beamd {e.why}") from None
            raise ConnectionError(f"beam: the private beamd failed to start:\n{e.log_tail}") from None

    def stop(self, timeout=10.0):
        stop_process(self.proc, timeout)
        shutil.rmtree(self.dir, ignore_errors=True)


# --- The node's session: what `ray start` leaves for ray.init and `ray stop`.
#
# `ray start` writes, in Ray's temp folder ($RAY_TMPDIR/ray, else
# $TMPDIR/ray, else /tmp/ray, as Ray's get_ray_temp_dir):
#   ray_current_cluster   the cluster's address, HOST:PORT (Ray's file)
#   beam_node.json        this node's daemon: socket, pid, cluster, session dir
# ray.init() / address="auto" / "HOST:PORT" read them to find the daemon.
#
# A session is followed only when nobody but this user (or root) could have
# written it: /tmp/ray belongs to whoever made it first, and a driver that
# followed another user's file to that user's daemon would unpickle what it
# sends. load_session() is the one reader of the file, for every command.

SESSION_FILE = "beam_node.json"


class SessionRefused(ConnectionError):
    """A session folder, file or socket this user must not trust."""


def ray_temp_dir():
    """Ray's default temp folder (ray._private.utils.get_ray_temp_dir)."""
    if os.environ.get("RAY_TMPDIR"):
        base = os.environ["RAY_TMPDIR"]
    elif os.environ.get("TMPDIR"):
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp"
    return os.path.join(base, "ray")


def pid_alive(pid):
    """True when pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return False


def pid_uid(pid):
    """The real uid pid runs as, or None when it is gone."""
    try:
        with open(f"/proc/{int(pid)}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


TEMP_ADVICE = (
    "Use a Ray temp folder of your own: set RAY_TMPDIR (or TMPDIR) to a folder only you can write, "
    "or remove this one if it is stale."
)


def _refuse(path, st, what, why):
    raise SessionRefused(
        f"beam: refusing {what} {path}: {why} (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}; you "
        f"are uid {os.getuid()}). Another user could have put it there to make you connect to their process. "
        + TEMP_ADVICE
    )


def _check_owner(path, st, what):
    if st.st_uid not in (os.getuid(), 0):
        _refuse(path, st, what, "it belongs to another user")


def trusted_path(path, what, kind="file"):
    """path's real location, once every folder on it and path itself (a
    "file", "folder" or "socket") belongs to this user or root and no other
    user may replace them: ssh's StrictModes rules, where a folder that group
    or others may write must have the sticky bit (as /tmp has). Raises
    SessionRefused naming the first that fails; OSError when path is missing."""
    real = os.path.realpath(path)
    st = os.stat(real)
    _check_owner(real, st, what)
    if kind == "folder" and not stat.S_ISDIR(st.st_mode):
        _refuse(real, st, what, "it is not a folder")
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        _refuse(real, st, what, "it is not a regular file")
    if kind == "socket" and not stat.S_ISSOCK(st.st_mode):
        _refuse(real, st, what, "it is not a socket")
    if kind != "socket" and st.st_mode & 0o022 and not (kind == "folder" and st.st_mode & stat.S_ISVTX):
        _refuse(real, st, what, "others may write it")
    folder = os.path.dirname(real)
    while True:
        fst = os.stat(folder)
        _check_owner(folder, fst, f"the folder of {what}")
        if fst.st_mode & 0o022 and not fst.st_mode & stat.S_ISVTX:
            _refuse(folder, fst, f"the folder of {what}", "others may write it and it has no sticky bit")
        if folder == "/":
            return real
        folder = os.path.dirname(folder)


def load_session(temp_dir=None):
    """The session file `ray start` left in temp_dir (Ray's temp folder by
    default), as a dict with at least pid (int), socket and cluster (str):
    None when there is none or it is not one (unreadable, not JSON, not such
    an object); SessionRefused when it, or the folder it is in, is not this
    user's (trusted_path)."""
    import json

    path = os.path.join(temp_dir or ray_temp_dir(), SESSION_FILE)
    try:
        real = trusted_path(path, "the session file")
        with open(real) as f:
            sess = json.load(f)
    except SessionRefused:
        raise
    except (OSError, ValueError):
        return None
    if not isinstance(sess, dict) or not isinstance(sess.get("pid"), int) or isinstance(sess["pid"], bool):
        return None
    if not all(isinstance(sess.get(k), str) for k in ("socket", "cluster")):
        return None
    return sess


def read_session(temp_dir=None):
    """The session `ray start` left on this node, as a dict, when its beamd
    still runs and answers on a socket that is this user's (or root's); else
    None. SessionRefused for a session another user could have written."""
    sess = load_session(temp_dir)
    if sess is None or not pid_alive(sess["pid"]):
        return None
    try:
        trusted_path(sess["socket"], "the beamd socket named in the session file", kind="socket")
    except SessionRefused:
        raise
    except OSError:  # gone (SessionRefused is an OSError too: a ConnectionError)
        return None
    if not socket_answers(sess["socket"]):
        return None
    return sess


def running_here(temp_root):
    """Why no new node may take this node's session: Ray's "already
    running" text when this user's `ray start` node (or a Cluster's head)
    runs here, else None; SessionRefused for a session not to be trusted."""
    running = read_session(temp_root)
    if running is None:
        return None
    return (
        f"Ray is already running on this node: beamd (pid {running['pid']}) of the cluster at "
        f"{running['cluster']}, serving {running['socket']}. Run `ray stop` first."
    )


def session_paths(temp_root):
    """(beam_node.json, ray_current_cluster) in temp_root."""
    return os.path.join(temp_root, SESSION_FILE), os.path.join(temp_root, "ray_current_cluster")


def write_atomic(path, text, mode=0o644):
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_session(temp_root, sess):
    """Leaves sess (a dict as load_session returns) for ray.init and `ray
    stop`: beam_node.json, and Ray's ray_current_cluster with its cluster."""
    import json

    info, current = session_paths(temp_root)
    write_atomic(info, json.dumps(sess, indent=1) + "\n")
    write_atomic(current, sess["cluster"])


def remove_session(temp_root, pid):
    """Removes the session files when they still describe beamd pid."""
    info, current = session_paths(temp_root)
    try:
        sess = load_session(temp_root)
    except SessionRefused:
        return
    if sess is None or sess["pid"] != pid:
        return
    paths = [info, current]
    if sess.get("temp_dir") and sess["temp_dir"] != temp_root:
        paths.append(session_paths(sess["temp_dir"])[1])
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


def daemon_hello(sock, status=True):
    """(hello, status) from the daemon at sock: hello describes that node,
    status the whole cluster as its daemon sees it."""
    # here, not at the top: this module is imported (cluster_utils, the
    # scanner) where the _beam extension may be absent
    import _beam

    client = _beam.Client(sock)
    try:
        hello = client.request("hello", {"role": "ctl", "pid": os.getpid()})
        return hello, (client.request("status", {}) if status else None)
    finally:
        client.close()


def daemon_status(sock):
    return daemon_hello(sock)[1]


def _addresses_of(host):
    import socket as _s

    try:
        return {ai[4][0] for ai in _s.getaddrinfo(host, None, proto=_s.IPPROTO_TCP)}
    except OSError:
        return set()


def same_cluster(address, sess):
    """Whether address (HOST:PORT) names the cluster of session sess: the
    head's address (as the head advertises it, or as a member joined it), or,
    on the head, any address of this machine it listens on, at its port."""
    host, _, port = address.rpartition(":")
    chost, _, cport = sess["cluster"].rpartition(":")
    if not host or port != cport:
        return False
    want = _addresses_of(host.strip("[]"))
    if want & (_addresses_of(chost) | {chost}):
        return True
    if sess.get("head") and sess.get("listen_ip") in ("0.0.0.0", "::"):
        return bool(want & ({"127.0.0.1", "::1"} | set(sess.get("local_ips", []))))
    return False
