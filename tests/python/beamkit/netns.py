# SPDX-License-Identifier: Apache-2.0
"""Network namespaces for the cluster tests: two namespaces joined by a veth
pair with addresses in 10.213.N.0/24 that exist only inside them (no route
to or from anywhere else, so no packet leaves them). Needs root and
`ip netns`: needs_netns skips a test otherwise."""

import os
import shutil
import signal
import subprocess

import pytest


def can_netns():
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if not shutil.which("ip"):
        return "no ip command (iproute2)"
    probe = f"beamprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


NETNS_SKIP = can_netns()  # why the netns tests cannot run here, or None
needs_netns = pytest.mark.skipif(NETNS_SKIP is not None, reason=NETNS_SKIP or "")


def ip_cmd(*args, ns=None, check=True):
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


class NetnsPair:
    """Two namespaces joined by a veth pair: a=10.213.N.1, b=10.213.N.2."""

    def __init__(self):
        tag = os.getpid() % 100000
        self.net = 1 + os.getpid() % 250
        self.a, self.b = f"beamh{tag}", f"beamm{tag}"
        self.va, self.vb = f"bh{tag}", f"bm{tag}"
        self.ip_a, self.ip_b = f"10.213.{self.net}.1", f"10.213.{self.net}.2"
        self.made = []
        try:
            for ns in (self.a, self.b):
                ip_cmd("netns", "add", ns)
                self.made.append(ns)
            # made in the first namespace, so no end of it ever sits in ours
            ip_cmd("link", "add", self.va, "type", "veth", "peer", "name", self.vb, ns=self.a)
            ip_cmd("link", "set", self.vb, "netns", self.b, ns=self.a)
            for ns, dev, addr in ((self.a, self.va, self.ip_a), (self.b, self.vb, self.ip_b)):
                ip_cmd("link", "set", "lo", "up", ns=ns)
                ip_cmd("addr", "add", f"{addr}/24", "dev", dev, ns=ns)
                ip_cmd("link", "set", dev, "up", ns=ns)
        except BaseException:
            self.close()
            raise

    def wrap(self, ns):
        return ["ip", "netns", "exec", ns]

    def netns_inode(self, ns):
        return os.stat(f"/run/netns/{ns}").st_ino

    def link(self, up):
        ip_cmd("link", "set", self.vb, "up" if up else "down", ns=self.b)

    def close(self):
        for ns in self.made:
            # processes still inside would keep it alive: the cluster's
            # teardown has stopped them by now; kill any stray one anyway
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []
