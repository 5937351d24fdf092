"""How many files a router may have open: as many as its hard limit allows.

A worker holds a descriptor for every TCP session of its proxy sources and receivers, every peer
link and every admin or web client. A process starts with its parent's soft limit: 1024 under
systemd, which sets the hard limit high (524288) for daemons to raise the soft one themselves.
At 1024 a busy endpoint portal runs out long before the host does, and refuses connections. Raised
once, in tnwgd before the workers are forked: they inherit it.
"""
from __future__ import annotations

import resource

# When the hard limit is unlimited the kernel still caps descriptors (fs.nr_open, 1048576 by default).
_UNLIMITED_TARGET = 1 << 20


def raise_open_files_limit() -> str | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit; what was done, for the log (None: nothing)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft >= target:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as err:
        return f"the open files limit stays at {soft} (hard limit {hard}): {err}"
    return f"open files limit raised from {soft} to {target}"
