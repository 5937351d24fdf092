"""Multi-hop routing between routers (spec/dro.md §2.5): pure logic, no sockets.

- :mod:`topology` — the topology map: every router's node id, name, version and adjacencies
  (domains and routers, with portal costs), updated from route-info, timed out, signed, and
  checked for the forbidden topologies.
- :mod:`paths` — the one lowest-cost path between two domains and the questions a portal asks of
  it (next hop toward a domain, where interest goes, whether a stream leaves by a portal).
- :mod:`recalculation` — when to recompute paths: backoff after the last change, named triggers.
- :mod:`route_info` — the route-info exchange as LBMC CONTROL messages (0x56, 0x57, 0x58).

Times are monotonic milliseconds passed in by the caller, so every module here is testable
without a clock.
"""
