# SPDX-License-Identifier: Apache-2.0
"""Processes and waiting, as the tests see them through /proc: is a pid
alive, which processes belong to a daemon, wait for a condition, a pid's
end or a file, or a child's line of output (read off its pipe); a
process's memory, fds and CPU time; a free port."""

import os
import resource
import select
import signal
import socket
import time

# A bound for a worker's start (an interpreter, ray's import, the class or
# task loaded): a hang guard, not a figure a test relies on (a start over 5 s
# was seen under ASan with stress-ng on 2 cores).
WORKER_START_S = 120.0


def wait_until(pred, timeout=10.0, interval=0.02):
    """True as soon as pred() is; pred()'s last answer after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def _stat(pid):
    """The fields of /proc/PID/stat after the command name (the state
    first), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def state(pid):
    """The one-letter state of pid (R, S, Z, ...), or None if there is no
    such process."""
    fields = _stat(pid)
    return fields[0] if fields else None


def last_cpu(pid):
    """The CPU pid's main thread last ran on (stat's field 39), or None if
    there is no such process."""
    fields = _stat(pid)
    return int(fields[36]) if fields else None


def alive(pid):
    """True while pid exists and is not a zombie (a zombie has stopped; its
    parent, or init, has not reaped it yet)."""
    return state(pid) not in (None, "Z")


def wait_gone(pids, timeout=10.0, interval=0.02):
    """True once none of pids (one pid or several) is alive."""
    pids = [pids] if isinstance(pids, int) else list(pids)
    return wait_until(lambda: not any(alive(p) for p in pids), timeout, interval)


def wait_file(path, timeout=10.0, interval=0.02):
    """True once path exists."""
    return wait_until(lambda: os.path.exists(path), timeout, interval)


def free_port(ip="127.0.0.1"):
    """A TCP port nothing listens on at ip (now)."""
    s = socket.socket()
    try:
        s.bind((ip, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def processes(needle, where="environ"):
    """Pids of live processes (not this one, no zombies) whose /proc/PID/<where>
    (environ or cmdline) holds the bytes needle."""
    needle = needle.encode() if isinstance(needle, str) else needle
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/{where}", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if (needle in data.split(b"\0") if where == "environ" else needle in data) and alive(int(entry)):
            pids.append(int(entry))
    return pids


def beam_processes(socket_path):
    """Pids of live processes started for the daemon at socket_path (workers
    carry BEAM_SOCKET in their environment)."""
    return processes(f"BEAM_SOCKET={socket_path}")


def kill_all(pids):
    """SIGKILL each of pids that is still there."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field}")


def rss_kib(pid):
    """The process's resident set (VmRSS), in KiB."""
    return _status_kib(pid, "VmRSS")


def hwm_kib(pid):
    """The process's peak RSS (VmHWM), in KiB."""
    return _status_kib(pid, "VmHWM")


def sanitized(pid):
    """True when the process runs under AddressSanitizer, whose quarantine
    keeps freed memory resident: RSS bounds do not apply there."""
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def raise_nofile(want):
    """Raises this process's soft RLIMIT_NOFILE to want (or the hard limit);
    a beamd started afterwards inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cmdline(pid):
    """pid's arguments ([b"sleep", b"5"]); [] if there is no such process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def reset_hwm(pid):
    """Resets pid's VmHWM to its current RSS (writing 5 to clear_refs; Linux >= 4.0)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def cpu_ns(pid):
    """The CPU time pid's threads have run (user + kernel, from
    /proc/PID/task/*/schedstat), in ns; None where unreadable."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        return None
    return total


def next_line(proc, deadline):
    """The next line of proc's stdout (a pipe), without its newline, or None
    when proc's output ended or time.monotonic() passed deadline first. It
    reads the pipe itself, keeping what came past the line in proc._beam_buf
    (as venv.read_until does), never through proc.stdout's buffer: lines
    that buffer took in are no longer readable on the pipe, and a select()
    on it would wait them out."""
    fd = proc.stdout.fileno()
    buf = getattr(proc, "_beam_buf", b"")
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        chunk = os.read(fd, 65536) if left > 0 and select.select([fd], [], [], left)[0] else None
        if not chunk:  # the time is up, or the output ended
            proc._beam_buf = b"" if chunk == b"" else buf
            return buf.decode(errors="replace") if chunk == b"" and buf else None
        buf += chunk
    line, proc._beam_buf = buf.split(b"\n", 1)
    return line.decode(errors="replace")


def _stderr(proc):
    return proc.stderr.read() if proc.stderr is not None and proc.poll() is not None else ""


def read_line(proc, prefix, timeout=30):
    """The rest of the first line of proc's stdout (a pipe) that starts
    with prefix (next_line); AssertionError (with proc's stderr once it
    ended) when none comes within timeout seconds."""
    deadline = time.monotonic() + timeout
    while (line := next_line(proc, deadline)) is not None:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise AssertionError(f"no {prefix!r} line; stderr: {_stderr(proc)}")


def read_match(proc, pattern, timeout=30):
    """The re.Match of the first line of proc's stdout (a pipe; next_line),
    colour codes removed, that matches the regex pattern; AssertionError
    when none comes within timeout seconds."""
    import re

    deadline = time.monotonic() + timeout
    seen = []
    while (line := next_line(proc, deadline)) is not None:
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        seen.append(line)
        m = re.match(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r}; lines: {seen[-20:]}")


BEAM_MEMFD = "/memfd:beam-object"  # how beam's shared-memory values (and graph slots) show in /proc/<pid>/fd


def memfds(pid, name=BEAM_MEMFD):
    """How many memfds called name pid holds open."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith(name)
        except OSError:
            pass  # closed meanwhile
    return n
