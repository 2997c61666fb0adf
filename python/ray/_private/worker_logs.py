# SPDX-License-Identifier: Apache-2.0
"""Worker output in the driver, as Ray's log monitor prints it.

beamd relays each line a worker prints, prefixed ``(Name pid=N) `` (plus
``, ip=…`` for another node's). A driver sets its client's ``queue_logs`` and
runs one thread here that takes the lines and writes them through
``sys.stdout``/``sys.stderr`` (so pytest's capsys and anything else that
swaps those sees them), as Ray's print_worker_logs does, with:

- the actor's ``__repr__`` in the prefix once its constructor has run: the
  worker prints ``:actor_name:<repr>`` (Ray's LOG_PREFIX_ACTOR_NAME) and the
  line itself is not shown;
- Ray's deduplication (ray/_private/ray_logging LogDeduplicator): a line
  seen from a second process within RAY_DEDUP_LOGS_AGG_WINDOW_S (5) seconds
  is held back and printed once the window ends as ``… [repeated Nx across
  cluster]``; RAY_DEDUP_LOGS=0 turns it off, RAY_DEDUP_LOGS_ALLOW_REGEX /
  RAY_DEDUP_LOGS_SKIP_REGEX as in Ray.
"""

import os
import re
import sys
import threading
import time

LOG_PREFIX_ACTOR_NAME = ":actor_name:"
_PREFIX = re.compile(r"^\((?P<name>.*?) ?pid=(?P<pid>\d+)(?P<ip>, ip=[^)]*)?\) ?")
_NUMBERS = re.compile(r"(\d+|0x[0-9a-fA-F]+)")
_warned = False


def _env_bool(name, default):
    v = os.environ.get(name)
    if v is None:
        return default
    return v.strip().lower() in ("1", "true", "yes", "on")


def _canonical(line):
    # Ray's _canonicalise_log_line: words with numbers differ between workers
    return " ".join(x for x in line.split() if not _NUMBERS.search(x))


def _repeated(count):
    global _warned
    text = f" [repeated {count}x across cluster]"
    if not _warned:
        _warned = True
        text += (
            " (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see "
            "https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html"
            "#log-deduplication for more options.)"
        )
    return text


class _State:
    __slots__ = ("timestamp", "count", "line", "prefix", "sources")

    def __init__(self, timestamp, line, prefix, source):
        self.timestamp = timestamp
        self.count = 0
        self.line = line
        self.prefix = prefix
        self.sources = {source}


class Deduplicator:
    """Ray's LogDeduplicator for one stream: lines in, lines to print out."""

    def __init__(self, window_s=None, allow_re=None, skip_re=None, timesource=time.monotonic):
        self.enabled = _env_bool("RAY_DEDUP_LOGS", True)
        self.window_s = window_s if window_s is not None else int(os.environ.get("RAY_DEDUP_LOGS_AGG_WINDOW_S", "5"))
        allow_re = allow_re if allow_re is not None else os.environ.get("RAY_DEDUP_LOGS_ALLOW_REGEX")
        skip_re = skip_re if skip_re is not None else os.environ.get("RAY_DEDUP_LOGS_SKIP_REGEX")
        self.allow_re = re.compile(allow_re) if allow_re else None
        self.skip_re = re.compile(skip_re) if skip_re else None
        self.recent = {}  # canonical line -> _State, oldest first
        self.now = timesource

    def add(self, prefix, source, line):
        """One line from source ((ip, pid)); returns the lines to print now."""
        if not self.enabled:
            return [prefix + line]
        if self.allow_re and self.allow_re.search(line):
            return [prefix + line] + self.expire()
        if self.skip_re and self.skip_re.search(line):
            return self.expire()
        out = []
        key = _canonical(line)
        state = self.recent.get(key) if key else None
        if not key:
            out.append(prefix + line)
        elif state is None:
            self.recent[key] = _State(self.now(), line, prefix, source)
            out.append(prefix + line)
        else:
            state.sources.add(source)
            if len(state.sources) > 1:
                state.count += 1
                state.line, state.prefix = line, prefix
            else:
                out.append(prefix + line)  # one process repeating itself is printed
        return out + self.expire()

    def expire(self):
        """Lines of patterns whose window has ended."""
        out = []
        now = self.now()
        while self.recent:
            key, state = next(iter(self.recent.items()))
            if now - state.timestamp < self.window_s:
                break
            del self.recent[key]
            if state.count > 1:
                out.append(state.prefix + state.line + _repeated(state.count))
                state.timestamp, state.count = now, 0
                self.recent[key] = state  # keeps aggregating, from now
            elif state.count > 0:
                out.append(state.prefix + state.line)
        return out

    def flush(self):
        out = []
        for state in self.recent.values():
            if state.count > 1:
                out.append(state.prefix + state.line + _repeated(state.count))
            elif state.count > 0:
                out.append(state.prefix + state.line)
        self.recent.clear()
        return out


class Printer:
    """The driver's thread that prints worker output (see the module doc)."""

    def __init__(self, client):
        self.client = client
        self.names = {}  # (pid, ip) -> the actor's repr
        self.dedup = {1: Deduplicator(), 2: Deduplicator()}
        client.queue_logs = True
        self.thread = threading.Thread(target=self._run, name="ray_print_logs", daemon=True)
        self.thread.start()

    def _write(self, stream, lines):
        if not lines:
            return
        f = sys.stdout if stream == 1 else sys.stderr
        try:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
        except Exception:
            pass  # a closed or odd stream must not end the printer

    def handle(self, stream, text):
        m = _PREFIX.match(text)
        if not m:
            self._write(stream, [text])
            return
        source = (m.group("pid"), m.group("ip") or "")
        line = text[m.end() :]
        if line.startswith(LOG_PREFIX_ACTOR_NAME):
            self.names[source] = line[len(LOG_PREFIX_ACTOR_NAME) :]
            return
        name = self.names.get(source, m.group("name"))
        prefix = f"({name} pid={m.group('pid')}{m.group('ip') or ''}) "
        self._write(stream, self.dedup[2 if stream != 1 else 1].add(prefix, source, line))

    def _run(self):
        while True:
            try:
                push = self.client.next_push(1.0)
            except Exception:
                break  # closed: every queued line was taken first
            if push is None:
                for stream, d in self.dedup.items():
                    self._write(stream, d.expire())
                continue
            op, params = push
            if op == "log":
                self.handle(int(params.get("stream", 2)), params.get("text", ""))
        self.flush()

    def flush(self):
        for stream, d in self.dedup.items():
            self._write(stream, d.flush())

    def stop(self, timeout=5.0):
        """After the client closed: waits for the queued lines to print."""
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)
