"""Network facts: InfiniBand devices, interfaces, the interface that routes to MASTER_ADDR, a free port."""

from __future__ import annotations

import errno
import ipaddress
import socket
from pathlib import Path

import psutil

from launcher.model import NetworkFacts


def probe_network(sys_ib: Path = Path("/sys/class/infiniband")) -> NetworkFacts:
    warnings: list[str] = []
    try:
        ib = tuple(sorted(p.name for p in sys_ib.iterdir())) if sys_ib.exists() else ()
    except OSError as err:
        ib = ()
        warnings.append(f"cannot list {sys_ib} ({err.strerror}): InfiniBand unknown")
    try:
        interfaces = tuple(sorted(psutil.net_if_addrs()))
    except Exception as err:
        interfaces = ()
        warnings.append(f"cannot list network interfaces ({err})")
    return NetworkFacts(ib_devices=ib, interfaces=interfaces, warnings=tuple(warnings))


def resolve(name: str) -> tuple[str, ...]:
    """The addresses `name` resolves to here, in the resolver's order; () when it resolves to none.
    Resolved once per run: a slow resolver is waited on once."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in infos))


def route_interface(addresses: tuple[str, ...], port: int = 9) -> str | None:
    """The interface whose address the kernel would use to reach the first of `addresses` (None if
    unknown)."""
    if not addresses:
        return None
    target = addresses[0]
    family = socket.AF_INET6 if ":" in target else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((target, port))  # UDP connect sends nothing; it only picks a route
            local_ip = sock.getsockname()[0]
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(addr.address.split("%")[0] == local_ip for addr in addrs):
            return name
    return None


def loopback_among(addresses: tuple[str, ...]) -> str | None:
    """The first loopback address among `addresses` (a host name Debian maps to 127.0.1.1, say); None when
    there is none."""
    bare = (address.split("%")[0] for address in addresses)
    return next((address for address in bare if ipaddress.ip_address(address).is_loopback), None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_taken(port: int) -> str | None:
    """Why torchrun's store on node 0 could not listen on `port` here: "in use" when a socket on this host
    already holds it (any listener, on any address, IPv4 or IPv6), "privileged" when this user may not
    listen there (a port below the system's unprivileged start, 1024 by default, without root); else None.

    SO_REUSEADDR as the store sets it, so a port with only closing connections counts as free.
    """
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return "in use"
            if err.errno == errno.EACCES:
                return "privileged"
    return None
