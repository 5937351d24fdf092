"""The peer link's lifecycle as a table (zguide style): (state, event) -> (next state, action).

:class:`router.portals.peer_link.PeerLink` looks each event up here and calls the named action;
a pair not in the table is ignored (e.g. a late timer for a connection already gone). STOP is
valid in every state but STOPPED. Its log ids are in router.eventlog.MESSAGE_IDS (peer-*).
"""
from __future__ import annotations

from enum import Enum


class LinkState(Enum):
    STOPPED = "stopped"
    CONNECTING = "connecting"           # initiator: TCP connect in progress
    WAITING = "waiting"                 # initiator: reconnect-interval before the next attempt
    LISTENING = "listening"             # acceptor: no companion connected
    HANDSHAKING = "handshaking"         # TCP up, companion's handshake not yet received
    UP = "up"


class LinkEvent(Enum):
    START = "start"
    CONNECTED = "connected"
    CONNECT_FAILED = "connect failed"
    ACCEPTED = "accepted"
    HANDSHAKE_OK = "handshake ok"
    HANDSHAKE_FAILED = "handshake failed"
    LOST = "lost"
    RETRY = "retry"
    STOP = "stop"


S, E = LinkState, LinkEvent
INITIATOR_TRANSITIONS = {
    (S.STOPPED, E.START): (S.CONNECTING, "_begin_connect"),
    (S.CONNECTING, E.CONNECTED): (S.HANDSHAKING, "_begin_handshake"),
    (S.CONNECTING, E.CONNECT_FAILED): (S.WAITING, "_connect_failed"),
    (S.WAITING, E.RETRY): (S.CONNECTING, "_begin_connect"),
    (S.HANDSHAKING, E.HANDSHAKE_OK): (S.UP, "_announce_up"),
    (S.HANDSHAKING, E.HANDSHAKE_FAILED): (S.WAITING, "_handshake_failed"),
    (S.HANDSHAKING, E.LOST): (S.WAITING, "_handshake_failed"),
    (S.UP, E.LOST): (S.WAITING, "_link_lost"),
}
ACCEPTOR_TRANSITIONS = {
    (S.STOPPED, E.START): (S.LISTENING, "_listen"),
    (S.LISTENING, E.ACCEPTED): (S.HANDSHAKING, "_begin_handshake"),
    (S.HANDSHAKING, E.ACCEPTED): (S.HANDSHAKING, "_replace_handshaking"),
    (S.UP, E.ACCEPTED): (S.UP, "_refuse_second"),
    (S.HANDSHAKING, E.HANDSHAKE_OK): (S.UP, "_announce_up"),
    (S.HANDSHAKING, E.HANDSHAKE_FAILED): (S.LISTENING, "_handshake_failed"),
    (S.HANDSHAKING, E.LOST): (S.LISTENING, "_handshake_failed"),
    (S.UP, E.LOST): (S.LISTENING, "_link_lost"),
}
for _table in (INITIATOR_TRANSITIONS, ACCEPTOR_TRANSITIONS):
    for _state in LinkState:
        if _state is not S.STOPPED:
            _table[(_state, E.STOP)] = (S.STOPPED, "_shutdown")
del _table, _state

