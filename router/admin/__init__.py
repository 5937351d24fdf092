"""The admin socket: how `routerctl` talks to a running router.

A ZeroMQ ROUTER socket in the supervisor (server.py) takes msgpack requests `{id, command, props}`
and answers `{id, status, errno, reason, data}` (protocol.py). Each command is one module in
commands/, found automatically, its docstring its specification; dispatch.py validates requests
and turns every failure into a stable error number, so a bad request can never hurt the daemon.
client.py finds a router's socket and asks it; router/cli/routerctl.py is the command line.
"""
