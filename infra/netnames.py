"""Host names, addresses and ids gpufleet did not make itself (a node's status, a bucket, the
team's store, the registry), checked against their formats in one place before they reach
slurm.conf, the registry or an ssh config: a host name is RFC 1123's (letters, digits and hyphens
in labels of 1 to 63 characters, neither first nor last a hyphen, 253 characters at most, a
trailing dot for the root allowed; RFC 1123 2.1 allows a leading digit, not an all-numeric top
label), an address is an IP literal as Python's ``ipaddress`` reads it, without an IPv6 zone
(``%eth0``: OpenSSH expands ``%`` in its config); a cloud's ids and places are checked by its own
pattern (``matching``). None can carry a space, a quote, a semicolon, a ``%`` or a newline, so
none can end a slurm.conf line, add an ssh config line or start a shell command.
"""

from __future__ import annotations

import ipaddress
import re

from gpufleet.errors import UntrustedValue

MAX_NAME = 253
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def is_label(value) -> bool:
    """One RFC 1123 label (a short host name, as Slurm's NodeName wants it)."""
    return isinstance(value, str) and _LABEL.fullmatch(value) is not None


def is_host_name(value) -> bool:
    """An RFC 1123 host name: dot-separated labels, the last not all digits (999.1.1.1 is no name)."""
    if not isinstance(value, str):
        return False
    labels = (value[:-1] if value.endswith(".") else value).split(".")
    return 0 < len(value) <= MAX_NAME and all(is_label(p) for p in labels) and not labels[-1].isdigit()


def is_address(value) -> bool:
    """An IPv4 or IPv6 literal, without a zone."""
    if not isinstance(value, str) or "%" in value:
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def label(value, what: str, source: str) -> str:
    if not is_label(value):
        raise UntrustedValue(what, value, "a short host name (one RFC 1123 label)", source)
    return value


def host_name(value, what: str, source: str) -> str:
    if not is_host_name(value):
        raise UntrustedValue(what, value, "an RFC 1123 host name", source)
    return value


def address(value, what: str, source: str) -> str:
    if not is_address(value):
        raise UntrustedValue(what, value, "an IP address", source)
    return value


def matching(value, pattern: re.Pattern, what: str, expected: str, source: str) -> str:
    """``value`` when the whole of it matches ``pattern`` (a cloud's id or place)."""
    if not (isinstance(value, str) and pattern.fullmatch(value)):
        raise UntrustedValue(what, value, expected, source)
    return value


def host(value, what: str, source: str) -> str:
    """An address or a host name (what OpenSSH's HostName takes)."""
    if not (is_address(value) or is_host_name(value)):
        raise UntrustedValue(what, value, "an IP address or an RFC 1123 host name", source)
    return value


def endpoint(value: str | None, fallback: str | None, source: str) -> tuple[str, str]:
    """(host, port) of a recorded ``host:port`` (``fallback``: the host when none is recorded; port
    22 when none is said), each checked; ("", "22") when neither says a host."""
    name, _, port = (value or "").rpartition(":")
    name = name or fallback or ""
    if name:
        host(name, "address", source)
    port = port or "22"
    if not (port.isdigit() and 0 < int(port) < 65536):
        raise UntrustedValue("port", port, "a TCP port", source)
    return name, port
