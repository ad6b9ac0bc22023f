"""A free TCP port on 127.0.0.1 (for a server this process starts: llama-server, the app under test or bench), and
the addresses a room opens to reach the app.

    port = free_port()                    # bound and released: free now, reused by the server that binds it next
    room_urls("0.0.0.0", 7860)            # ["http://192.168.1.20:7860"]: each interface's IPv4 address but loopback's
    serve_host(None)                      # --host, else GRADIO_SERVER_NAME, else 0.0.0.0 on a Space, else 127.0.0.1

Left out: reserving the port (another process may take it between this call and the server's bind), IPv6
addresses, and what lies between the room and the machine (a firewall, a guest network that isolates clients).
"""
from __future__ import annotations

import ipaddress
import os
import socket

EVERY_INTERFACE = ("0.0.0.0", "::", "")


def free_port() -> int:
    """A port the OS has just given out on 127.0.0.1.

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_host(asked: str | None) -> str:
    """The address the app listens on: `asked` (--host), else Gradio's own GRADIO_SERVER_NAME, else every interface
    on a Space (SPACE_ID set: its proxy reaches the container from outside), else 127.0.0.1 (this machine only)."""
    if asked:
        return asked
    if os.environ.get("GRADIO_SERVER_NAME"):
        return os.environ["GRADIO_SERVER_NAME"]
    return "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"


def interface_addresses() -> list[str]:
    """This machine's IPv4 addresses that another machine could reach: every interface's, loopback and link-local
    ones left out (psutil reads them; nothing is sent)."""
    import psutil

    found = []
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family != socket.AF_INET:
                continue
            ip = ipaddress.ip_address(entry.address)
            if not (ip.is_loopback or ip.is_link_local) and entry.address not in found:
                found.append(entry.address)
    return found


def room_urls(host: str, port: int, addresses: list[str] | None = None, space_host: str | None = None) -> list[str]:
    """The page's addresses as a room would open them: a Space's own (SPACE_HOST, https), else for a server on
    every interface one URL per address (`addresses`, default: interface_addresses()), else the host it listens on
    (127.0.0.1: this machine alone).

    >>> room_urls("127.0.0.1", 7860, [])
    ['http://127.0.0.1:7860']
    >>> room_urls("0.0.0.0", 7860, ["192.168.1.20", "10.0.0.5"])
    ['http://192.168.1.20:7860', 'http://10.0.0.5:7860']
    >>> room_urls("0.0.0.0", 7860, [], space_host="someone-playground.hf.space")
    ['https://someone-playground.hf.space']
    """
    space_host = os.environ.get("SPACE_HOST") if space_host is None else space_host
    if space_host:
        return [f"https://{space_host}"]
    if host in EVERY_INTERFACE:
        return [f"http://{a}:{port}" for a in (interface_addresses() if addresses is None else addresses)]
    return [f"http://{host}:{port}"]


def room_served(host: str, endpoint: bool) -> str:
    """Why people other than this machine's reach the app ("": no one else does): its OpenAI-compatible endpoint is
    on (`endpoint`), or the page listens on an address other than loopback. An address is not an identity: a room
    behind one address, or the tests on loopback with the endpoint on, is served all the same.

    >>> room_served("127.0.0.1", False), room_served("0.0.0.0", False)
    ('', 'the page listens on 0.0.0.0')
    >>> room_served("127.0.0.1", True)
    'the OpenAI-compatible endpoint is on'
    """
    reasons = (["the OpenAI-compatible endpoint is on"] if endpoint else []) + (
        [] if only_this_machine(host) else [f"the page listens on {host}"])
    return " and ".join(reasons)


def only_this_machine(host: str) -> bool:
    """True when a server on `host` answers this machine alone (a loopback address).

    >>> only_this_machine("127.0.0.1"), only_this_machine("localhost"), only_this_machine("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
