# SPDX-License-Identifier: Apache-2.0
"""This node's IP address, found one way for every caller: ``ray.util``'s
``get_node_ip_address``, the node IP in an error's header, and the IP
``ray start`` advertises for a member. (Ray keeps its finder in this module
too, as ``ray._private.services.get_node_ip_address``.)

No packet is ever sent: the address comes from the kernel's routing (a UDP
socket's source address after ``connect``) or from its tables
(``/proc/net/route``, the rule beamd itself uses to pick its IP).
"""

import fcntl
import os
import socket
import struct

# Ray's default: "the address this node reaches the internet from", which is
# the default route's interface address, the one beamd advertises.
DEFAULT_ADDRESS = "8.8.8.8:53"
_SIOCGIFADDR = 0x8915
# The IP of the node this process's runtime joined (its beamd's), while it
# is joined: ray._private.worker says so at ray.init / a worker's start and
# at shutdown (this module imports nothing of ray).
_runtime_ip = None


def runtime_joined(node_ip):
    """This process joined a node whose beamd uses node_ip (None: it left)."""
    global _runtime_ip
    _runtime_ip = node_ip


def get_node_ip_address(address=DEFAULT_ADDRESS):
    """This node's IP: after ray.init the one its beamd uses (so it matches
    ``node:<ip>`` and ``NodeManagerAddress``); before, ``BEAM_NODE_IP`` when
    set, else the address this machine reaches ``address`` ("host:port")
    from (for the default, the default route's), as Ray's does."""
    if _runtime_ip is not None:
        return _runtime_ip
    env = os.environ.get("BEAM_NODE_IP")
    if env:
        return env
    return node_ip_address_from_perspective(address)


def node_ip_address_from_perspective(address=DEFAULT_ADDRESS):
    """The source address toward ``address`` ("host:port"; the default means
    the default route); the default route's interface address when there is
    no route to it, and 127.0.0.1 when there is no default route either."""
    if address != DEFAULT_ADDRESS:
        host, _, port = address.rpartition(":")
        ip = route_ip_to(host.strip("[]"), port)
        if ip:
            return ip
    return default_route_ip()


def route_ip_to(host, port):
    """The address this machine reaches host:port from, or None when it has
    no route there (or the address does not parse)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, int(port)))
            return s.getsockname()[0]
    except (OSError, ValueError):
        return None


def default_route_ip():
    """The address of the default route's interface, read from the kernel's
    tables as beamd reads them; 127.0.0.1 when there is no default route."""
    try:
        with open("/proc/net/route") as f:
            next(f)
            iface = next((p[0] for p in (line.split() for line in f) if p[1] == "00000000"), None)
        if iface:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
                return socket.inet_ntoa(packed[20:24])
    except (OSError, StopIteration):
        pass
    return "127.0.0.1"
