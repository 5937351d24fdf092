"""Paths of the checked-in example files and builders for small one-off configurations."""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
VALID = HERE / "valid"
BROKEN = HERE / "broken"


def endpoint(name: str, domain_id: int | str, cfg: str | None = None, before: str = "", after: str = "") -> str:
    """One <endpoint> in DTD order: `before` goes between domain-id and lbm-config, `after` follows it."""
    lbm = f"<lbm-config>{cfg}</lbm-config>" if cfg else ""
    return f"<endpoint><name>{name}</name><domain-id>{domain_id}</domain-id>{before}{lbm}{after}</endpoint>"


def peer(name: str, link: str = "<acceptor><listen-port>26123</listen-port></acceptor>",
         before: str = "", after: str = "") -> str:
    """One <peer>: `before` goes between name and the link, `after` follows the link."""
    return f"<peer><name>{name}</name>{before}<single-tcp>{link}</single-tcp>{after}</peer>"


TWO_LANS = endpoint("LAN1", 1, "lan1.cfg") + endpoint("LAN2", 2, "lan2.cfg")
