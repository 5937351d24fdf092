"""What the LBT-IPC tests share: a receiver collecting a topic, and the one session a context joined."""
from __future__ import annotations

from router.lbtipc.receiver import LbtipcSessionClient
from tests.support.processes import wait_for


def collect(context, topic):
    """(messages' data, receiver event kinds), filled as they come."""
    got, events = [], []
    context.receiver(topic, on_batch=lambda ms: got.extend(m.data for m in ms),
                     on_event=lambda e: events.append(e.kind))
    return got, events


def joined_stream(context) -> LbtipcSessionClient:
    wait_for(lambda: context.clients, 10, message="the receiving context joins the LBT-IPC session")
    (stream,) = context.clients.values()
    assert isinstance(stream, LbtipcSessionClient)
    return stream
