"""What the router takes as a host name (ACL conditions, <web-monitor>, routerctl -s): labels of
letters, digits, hyphens and the "_" /etc/hosts allows, a hyphen at neither end of one, at most 63
each, dots between them and one at the end if wanted (RFC 1123). Callers that also take addresses
look for those first: "10.1.2.3" is a name by these rules too."""
from __future__ import annotations

import re

_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")


def is_host_name(text: str) -> bool:
    return _HOST_NAME.fullmatch(text) is not None
