"""Which addresses count as local: the rule both sides use for what may run without TLS.

>>> is_loopback_host("127.0.0.1"), is_loopback_host("::1"), is_loopback_host("localhost")
(True, True, True)
>>> is_loopback_host("0.0.0.0"), is_loopback_host("10.0.0.5"), is_loopback_host("example.com")
(False, False, False)
"""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
