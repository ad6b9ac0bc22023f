"""A free TCP port on 127.0.0.1: for a server this process starts (llama-server, the app under test or bench).

    port = free_port()   # bound and released: free now, reused by the server that binds it next

Left out: reserving the port (another process may take it between this call and the server's bind).
"""
from __future__ import annotations

import socket


def free_port() -> int:
    """A port the OS has just given out on 127.0.0.1.

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
