"""The control bus over real ZeroMQ ipc:// sockets: codecs, snapshot + numbered updates."""
import msgpack
import pytest
import zmq
from hypothesis import given, strategies as st

from router.ipc import bus_messages as bm
from router.ipc.bus import BusClient, BusHub
from router.monitor.counters import PortalCounters
from router.um.loop import EventLoop
from tests.support.event_loops import spin


def test_codec_round_trip():
    for message in (bm.Hello("LAN1", 2, 1234), bm.Interest("LAN1", 7, bm.INTEREST_PCRE, "^md\\.", bm.OP_ADD, 5),
                    bm.PortalUp("LAN2", 1, 3), bm.SetCost("LAN1", 4), bm.Shutdown("stop"), bm.Probe("LAN1", 1234),
                    bm.Snapshot(9, (bm.Interest("A", 1, 0, "t", 0, 3),), (("A", 0, 1),))):
        assert bm.decode(bm.encode(message)) == message


@given(st.binary(max_size=64))
def test_garbage_raises_only_bus_error(data):
    try:
        bm.decode(data)
    except bm.BusError:
        pass


def test_wrong_shapes_are_bus_errors():
    for value in ([], [99], [0, "only-one-field"], {"a": 1}, [1, "p", "not-int", 0, "t", 0, 0]):
        with pytest.raises(bm.BusError):
            bm.decode(msgpack.packb(value))


@pytest.fixture
def bus(tmp_path):
    context = zmq.Context()
    hub_loop = EventLoop("hub")
    hub = BusHub(context, f"ipc://{tmp_path}/bus", f"ipc://{tmp_path}/bus-pub", hub_loop)
    made = []

    def client(name, **extra):
        loop = EventLoop(name)
        received = []
        made.append((loop, BusClient(context, *hub.endpoints, name, loop, received.append, **extra)))
        return loop, made[-1][1], received
    yield hub, hub_loop, client
    for loop, c in made:
        c.close()
        loop.close()
    hub.close()
    hub_loop.close()
    context.term()


def test_snapshot_then_numbered_updates(bus):
    hub, hub_loop, client = bus
    loop_a, a, got_a = client("A")
    a.hello(1, 100)
    spin([hub_loop, loop_a], lambda: any(isinstance(m, bm.Snapshot) for m in got_a))
    a.send(bm.Interest("A", 1, bm.INTEREST_TOPIC, "t1", bm.OP_ADD))
    spin([hub_loop, loop_a], lambda: any(isinstance(m, bm.Interest) for m in got_a))
    # A late joiner gets the interest in its snapshot, and never the same update twice.
    loop_b, b, got_b = client("B")
    b.hello(1, 101)
    spin([hub_loop, loop_a, loop_b], lambda: any(isinstance(m, bm.Snapshot) for m in got_b))
    snapshot = next(m for m in got_b if isinstance(m, bm.Snapshot))
    assert [(i.portal, i.symbol) for i in snapshot.interest] == [("A", "t1")]
    a.send(bm.Interest("A", 1, bm.INTEREST_TOPIC, "t1", bm.OP_CANCEL))
    spin([hub_loop, loop_a, loop_b], lambda: any(isinstance(m, bm.Interest) and m.op == bm.OP_CANCEL for m in got_b))
    interest_updates = [m for m in got_b if isinstance(m, bm.Interest)]
    assert [m.op for m in interest_updates] == [bm.OP_CANCEL]
    assert hub.interest == {}


def test_malformed_frames_are_counted_not_fatal(bus, tmp_path):
    hub, hub_loop, client = bus
    raw = zmq.Context.instance().socket(zmq.DEALER)
    raw.connect(hub.endpoints[0])
    raw.send(b"\xc1garbage")
    raw.send_multipart([b"x", b"y", b"z"])
    spin([hub_loop], lambda: hub.counters["malformed"] >= 2)
    raw.close(0)
    loop_a, a, got_a = client("A")
    a.hello(1, 1)
    spin([hub_loop, loop_a], lambda: any(isinstance(m, bm.Snapshot) for m in got_a))


def test_a_malformed_update_a_worker_drops_reaches_its_portals_counters(bus):
    """The portal counter bus_messages_malformed (routerctl stats, the portal page) is the worker's
    count of what it could not decode: a message it drops does not go unseen."""
    hub, hub_loop, client = bus
    counters = PortalCounters()
    loop_a, a, got_a = client("A", on_malformed=lambda: counters.add("bus_messages_malformed"))
    a.hello(1, 1)
    spin([hub_loop, loop_a], lambda: any(isinstance(m, bm.Snapshot) for m in got_a))
    hub.publisher.send(b"\xc1garbage")
    spin([hub_loop, loop_a], lambda: counters.get("bus_messages_malformed") == 1)
    assert a.counters["malformed"] == 1


def test_workers_starting_together_each_learn_of_every_portal(bus):
    """A worker's subscription reaches the hub's publisher some time after it connects: the
    snapshot must not be taken before it does, or what is published in between is lost to it
    (a worker that missed another's PortalUp would never forward to it)."""
    hub, hub_loop, client = bus
    names = [f"P{i}" for i in range(8)]

    def on_message(identity, message):
        if isinstance(message, bm.Hello):
            hub.portal_up(message.portal, names.index(message.portal), message.generation)
    hub.on_message = on_message
    clients = [client(name) for name in names]
    for number, (_, c, _) in enumerate(clients):
        c.hello(1, number)
    loops = [hub_loop] + [loop for loop, _, _ in clients]

    def known(received):
        portals = set()
        for message in received:
            if isinstance(message, bm.Snapshot):
                portals.update(name for name, _, _ in message.portals)
            elif isinstance(message, bm.PortalUp):
                portals.add(message.portal)
        return portals
    spin(loops, lambda: all(known(received) == set(names) for _, _, received in clients))
