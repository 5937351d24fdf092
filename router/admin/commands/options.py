from __future__ import annotations

from router.admin import tables
from router.admin.commands.base import Argument, Command, portal_names
from router.admin.protocol import AdminError, Errno
from router.monitor.views import UM_OPTION_PAGES, portal_options


class Options(Command):
    """Show an endpoint portal's UM options: value, default and the file and line that set each.

    Usage: routerctl options PORTAL [SCOPE]

    SCOPE is one of source-context, receive-context, source, receiver, wildcard-receiver (the
    scopes of the portal's two contexts, as the web monitor's option pages of the portal): every
    option of it. Without SCOPE, the options set (by a file, <lbm-attributes> or the router) in
    every scope. These are the options the portal started with; a reload that changes them
    restarts the portal. A peer portal has no UM contexts, and an unknown SCOPE is no scope:
    errno 4 (INVALID_PROPERTY).

    Reply data: {"portal": NAME, "scopes": [{"page": STR, "title": STR, "scope": STR,
                 "options": [{"option": STR, "value": STR, "default": STR, "set": BOOL, "origin": STR|null}]}]}
    """

    arguments = (Argument("portal", "an endpoint portal", required=True),
                 Argument("scope", f"one of {', '.join(UM_OPTION_PAGES)} (default: what was set, in each)"))

    def execute(self, supervisor, props: dict) -> dict:
        [name] = portal_names(supervisor, props["portal"])
        if supervisor.workers[name].config.kind != "endpoint":
            raise AdminError(Errno.INVALID_PROPERTY, f"portal '{name}' is a {supervisor.workers[name].config.kind} "
                                                     "portal: only endpoint portals have UM contexts")
        which = props.get("scope")
        if which is not None and which not in UM_OPTION_PAGES:
            raise AdminError(Errno.INVALID_PROPERTY, f"no scope '{which}' (scopes: {', '.join(UM_OPTION_PAGES)})")
        scopes = []
        for page in [which] if which else UM_OPTION_PAGES:
            found = portal_options(supervisor, name, page)
            if not which:
                found["options"] = [option for option in found["options"] if option["set"]]
            scopes.append({key: found[key] for key in ("page", "title", "scope", "options")})
        return {"portal": name, "scopes": scopes}

    def render(self, data: dict) -> str:
        rows = [[scope["page"], o["option"], o["value"], o["default"],
                 o["origin"] or ("the router" if o["set"] else "default")]
                for scope in data["scopes"] for o in scope["options"]]
        if not rows:
            return f"portal {data['portal']}: every option has its default"
        return tables.table(["SCOPE", "OPTION", "VALUE", "DEFAULT", "SET BY"], rows)
