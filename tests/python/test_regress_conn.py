# SPDX-License-Identifier: Apache-2.0
"""Regression tests for issue 10, bugs 5 and 6, against a real beamd.

Bug 5: the output queue's cap counted payload, not memory. Each queued
message cost a whole 8 KiB msgpack buffer and a write request, so 100k short
log lines to a stopped driver took ~400 MiB, and unread tiny replies ~2 GiB,
far past --max-outq. Now a queued message costs what it holds (small ones
are coalesced into shared blocks), the cap counts that, and an actor's
output to a driver that does not read is dropped past the backpressure mark,
with a "N lines dropped" line once the driver reads again.

Bug 6: processes an actor started (a Popen child, a start_new_session child,
a double-forked grandchild) outlived the actor or, with a SIGKILLed beamd,
even the daemon. None may survive either.
"""

import os
import signal
import time

import pytest

from beamkit.client import Conn, Watcher, request
from beamkit.daemon import Beamd, start_driver
from beamkit.procs import alive, cmdline, hwm_kib, reset_hwm, rss_kib, sanitized, wait_file, wait_gone, wait_until

MAX_OUTQ = 16 << 20  # soft mark (backpressure, log drop): MAX_OUTQ / 16 = 1 MiB


@pytest.fixture
def small_outq():
    d = Beamd(extra=["--max-outq", str(MAX_OUTQ), "--log-level", "info"])
    watcher = Watcher(d.socket)
    yield d, watcher
    watcher.stop()
    d.check_closed()


def _read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


FLOOD = """
    import os, sys, time, ray
    ray.init()

    @ray.remote
    class Spam:
        def ping(self):
            return os.getpid()

        def spam(self, n, go):
            open(go + ".started", "w").close()
            while not os.path.exists(go):
                time.sleep(0.01)
            for i in range(n):
                print(f"flood line {i:06d}")
            sys.stdout.flush()
            return n

    a = Spam.remote()
    ref = a.spam.remote(N, GO)
    # one write: the log thread prints the relayed lines meanwhile, and print()
    # writes its pieces one by one ("RESULT(Spam pid=..) flood line ..." once)
    sys.stdout.write(f"RESULT {ray.get(ref)}\\n")
    sys.stdout.flush()
    # the drop marker comes once the queue has drained, after that reply:
    # this call's reply comes after the marker
    ray.get(a.ping.remote())
"""


def test_log_flood_to_a_stopped_driver_is_bounded_and_dropped_with_a_marker(small_outq, tmp_path):
    """100k short lines from an actor to a driver stopped with SIGSTOP: beamd
    stays within a bound derived from --max-outq (it drops what the driver
    cannot take instead of queueing it), keeps serving another client, does
    not drop the stopped driver, and tells it how many lines it lost."""
    d, watcher = small_outq
    n = 100_000
    go = tmp_path / "go"
    out = tmp_path / "driver.out"
    code = FLOOD.replace("N, GO", f"{n}, {str(go)!r}")
    drv = start_driver(code, env={"BEAM_SOCKET": d.socket}, unset=("RAY_ADDRESS",), output=out)
    try:
        assert wait_file(str(go) + ".started", 60), _read(out)
        watcher.take()
        rss0 = rss_kib(d.proc.pid)
        reset_hwm(d.proc.pid)
        drv.send_signal(signal.SIGSTOP)
        go.touch()
        # beamd has relayed (or dropped) the last line once it logs it
        assert wait_until(lambda: f"flood line {n - 1:06d}" in d.read_log(), 120), d.read_log()[-2000:]
        grown = hwm_kib(d.proc.pid) - rss0
        print(f"flood: beamd peak +{grown} KiB")
        if not sanitized(d.proc.pid):
            # logs are dropped past MAX_OUTQ / 16 queued; MAX_OUTQ itself is generous
            assert grown < MAX_OUTQ // 1024, f"beamd grew by {grown} KiB for {n} lines to a stopped driver"
        answers, slowest, errors = watcher.take()
        assert not errors and answers > 0, (answers, errors)
        assert drv.poll() is None
        drv.send_signal(signal.SIGCONT)
        assert drv.wait(timeout=120) == 0, _read(out)[-3000:]
        # the burst is over: its memory goes back
        after = rss_kib(d.proc.pid) - rss0
        if not sanitized(d.proc.pid):
            assert after < MAX_OUTQ // 1024, f"beamd kept {after} KiB after the flood"
    finally:
        if drv.poll() is None:
            drv.send_signal(signal.SIGCONT)
            drv.kill()
            drv.wait()
    text = _read(out)
    assert f"RESULT {n}" in text, text[-2000:]
    got = text.count("flood line ")
    dropped = [line for line in text.splitlines() if "lines dropped" in line]
    assert dropped, f"no drop marker in the driver's output ({got} lines arrived)"
    lost = sum(int(line.split(" lines dropped")[0].split()[-1]) for line in dropped)
    assert got + lost == n, (got, lost, dropped)
    assert 0 < got < n
    print(f"flood: beamd peak +{grown} KiB, +{after} KiB after; {got} lines arrived, {lost} dropped")


def test_unread_tiny_replies_are_counted_by_what_they_cost(small_outq):
    """500k pipelined requests with tiny replies, never read: beamd stops
    reading the client at the soft mark, and what it holds for it is bounded
    by --max-outq, not by 8 KiB a reply; another client is served meanwhile;
    the memory goes back once the client leaves."""
    d, watcher = small_outq
    pid = d.proc.pid
    c = Conn(d.socket)
    c.hello("driver")
    watcher.take()
    rss0 = rss_kib(pid)
    reset_hwm(pid)
    n = 500_000
    batch = 1000
    sent_reqs = 0
    try:
        c.sock.setblocking(False)
        pending = b""
        blocked_since = None
        while sent_reqs < n or pending:
            if not pending:
                pending = b"".join(request(sent_reqs + i + 10, "release", {"objects": []}) for i in range(batch))
                sent_reqs += batch
            try:
                k = c.sock.send(pending)
                pending = pending[k:]
                blocked_since = None
            except BlockingIOError:
                # beamd stopped reading us (backpressure): wait a moment to be sure
                if blocked_since is None:
                    blocked_since = time.monotonic()
                elif time.monotonic() - blocked_since > 1.0:
                    break
                time.sleep(0.01)
        grown = hwm_kib(pid) - rss0
        if not sanitized(pid):
            assert grown < MAX_OUTQ // 1024 * 2, f"beamd grew by {grown} KiB ({sent_reqs} requests sent)"
        answers, slowest, errors = watcher.take()
        assert not errors and answers > 0, (answers, errors)
        assert d.proc.poll() is None
    finally:
        c.close()
    # the client is gone: what it had queued goes back
    assert wait_until(lambda: d.status()["clients"]["drivers"] == 0, 10)
    after = rss_kib(pid) - rss0
    print(f"tiny replies: {sent_reqs} requests sent, beamd peak +{grown} KiB, +{after} KiB after the client left")
    if not sanitized(pid):
        assert after < MAX_OUTQ // 1024, f"beamd kept {after} KiB after the client left"


# --- bug 6: an actor's processes die with it ---------------------------------

SPAWNER = """
    import os, signal, subprocess, sys, time, ray
    ray.init()

    def _runs(pid, arg):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().split(b"\\0")[:2] == [b"sleep", arg]
        except OSError:
            return False

    @ray.remote
    class Spawner:
        def spawn(self):
            p1 = subprocess.Popen(["sleep", "1001"])
            p2 = subprocess.Popen(["sleep", "1002"], start_new_session=True)
            r, w = os.pipe()
            mid = os.fork()
            if mid == 0:
                os.setsid()
                g = os.fork()
                if g == 0:
                    os.execvp("sleep", ["sleep", "1003"])
                os.write(w, str(g).encode())
                os._exit(0)
            os.close(w)
            g = int(os.read(r, 64))
            os.close(r)
            os.waitpid(mid, 0)
            # all three run `sleep` before the test goes on
            want = ((p1.pid, b"1001"), (p2.pid, b"1002"), (g, b"1003"))
            while not all(_runs(pid, arg) for pid, arg in want):
                time.sleep(0.01)
            return [p1.pid, p2.pid, g, os.getpid()]

    a = Spawner.remote()
    pids = ray.get(a.spawn.remote())
    print("PIDS", *pids, flush=True)
    how = HOW
    if how == "kill":
        ray.kill(a)
    elif how == "exit":
        try:
            ray.get(a.__ray_terminate__.remote())
        except Exception:
            pass
    if how in ("kill", "exit", "beamd"):
        time.sleep(600)
"""


def _sleeps(pid, arg):
    """pid runs `sleep arg` (not a zombie, not a reused pid)."""
    return alive(pid) and cmdline(pid)[:2] == [b"sleep", arg.encode()]


def _survivors(pids):
    return [(p, a) for p, a in zip(pids, ("1001", "1002", "1003")) if _sleeps(p, a)]


@pytest.mark.parametrize("how", ["kill", "exit", "driver_exit", "beamd"])
def test_an_actors_processes_do_not_outlive_it(tmp_path, how):
    """A Popen child, a start_new_session child and a double-forked,
    setsid'd grandchild of an actor are all gone after (a) ray.kill of the
    actor, (b) the actor's own exit, (c) its driver's exit, (d) SIGKILL of
    beamd."""
    d = Beamd()
    out = tmp_path / "driver.out"
    code = SPAWNER.replace("HOW", repr(how))
    drv = start_driver(code, env={"BEAM_SOCKET": d.socket}, unset=("RAY_ADDRESS",), output=out)
    pids = []
    try:
        assert wait_until(lambda: "PIDS" in _read(out), 60), _read(out)
        line = next(ln for ln in _read(out).splitlines() if ln.startswith("PIDS"))
        pids = [int(x) for x in line.split()[1:4]]
        worker = int(line.split()[4])
        if how == "beamd":
            assert len(_survivors(pids)) == 3, _survivors(pids)
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait()
        elif how == "driver_exit":
            assert drv.wait(timeout=60) == 0, _read(out)
        gone = wait_until(lambda: not _survivors(pids), 15)
        assert gone, f"{how}: still running: {_survivors(pids)}"
        assert wait_gone(worker, 15)
    finally:
        for p, _ in _survivors(pids):
            os.kill(p, signal.SIGKILL)
        if drv.poll() is None:
            drv.kill()
            drv.wait()
        rc, leftover = d.close()
    if how != "beamd":
        assert rc == 0, f"beamd exited with {rc}:\n{d.read_log()[-3000:]}"
    assert not leftover, f"beam processes left behind: {leftover}"
