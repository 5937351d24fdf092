"""Messages to one peer over the bus's ROUTER and DEALER sockets while that peer does not read (a
worker stopped, busy or SIGSTOPped; a supervisor stuck): ZeroMQ's queues fill, and what does not
fit must wait in an outbox until the peer drains, not vanish. Real ZeroMQ sockets; the peer that
falls behind is one whose loop the test does not run, so its queues fill without sleeps."""

import pytest
import zmq

from router.ipc import bus_messages as bm
from router.ipc.bus import BusClient, BusHub
from router.monitor.counters import PortalCounters
from router.um.loop import EventLoop
from tests.support.event_loops import spin

# More than ZeroMQ's default queues (1000 messages each side) and the kernel's socket buffers hold,
# and less than an outbox holds (router.ipc.outbox.OUTBOX_LIMIT)
QUEUE_OVERFLOW = 5_000
WHAT = "q" * 100            # a query of some size: fills the kernel's buffers sooner


class Worker:
    """What a worker got from the hub, in the order it got it."""

    def __init__(self):
        self.messages: list = []

    def on_message(self, message) -> None:
        self.messages.append(message)

    def of(self, kind: type) -> list:
        return [m for m in self.messages if isinstance(m, kind)]

    def query_ids(self) -> list[int]:
        return [m.request_id for m in self.of(bm.Query)]


@pytest.fixture
def bus(tmp_path):
    """`start(name, **client_options) -> (client, loop, worker)`: a worker that said hello."""
    context = zmq.Context()
    hub_loop = EventLoop("hub")
    made = []

    def make_hub(**options):
        made.append(BusHub(context, f"ipc://{tmp_path}/bus", f"ipc://{tmp_path}/bus-pub", hub_loop, **options))
        return made[0]

    def start(name, **options):
        loop, worker = EventLoop(name), Worker()
        client = BusClient(context, *made[0].endpoints, name, loop, worker.on_message, **options)
        made.append((client, loop))
        client.hello(1, len(made))
        spin([hub_loop, loop], lambda: worker.of(bm.Snapshot))
        return client, loop, worker
    yield make_hub, hub_loop, start
    for client, loop in made[1:]:
        if not client.dealer.closed:            # a test may have stopped a worker itself
            client.close()
            loop.close()
    if made:
        made[0].close()
    hub_loop.close()
    context.term()


def test_queries_to_a_stalled_worker_all_arrive_in_order_once_it_drains(bus):
    make_hub, hub_loop, start = bus
    hub = make_hub()
    client, loop, worker = start("A")
    for request_id in range(QUEUE_OVERFLOW):     # the worker reads none of them meanwhile
        hub.send_to("A", bm.Query(request_id, WHAT))
    spin([hub_loop, loop], lambda: worker.query_ids()[-1:] == [QUEUE_OVERFLOW - 1])
    assert worker.query_ids() == list(range(QUEUE_OVERFLOW))


def test_a_cost_changed_while_the_worker_is_stalled_takes_effect_once_it_drains(bus):
    """A reload's SetCost is state: the newest of several changes is the one that matters, and
    it comes after what was sent before it."""
    make_hub, hub_loop, start = bus
    hub = make_hub()
    client, loop, worker = start("A")
    for request_id in range(QUEUE_OVERFLOW):
        hub.send_to("A", bm.Query(request_id, WHAT))
    for cost in (5, 6, 7):                       # three reloads while it is stalled
        hub.send_to("A", bm.SetCost("A", cost))
    hub.send_to("A", bm.Query(QUEUE_OVERFLOW, "last"))
    spin([hub_loop, loop], lambda: worker.query_ids()[-1:] == [QUEUE_OVERFLOW])
    assert worker.of(bm.SetCost) == [bm.SetCost("A", 7)]
    assert worker.messages[-2:] == [bm.SetCost("A", 7), bm.Query(QUEUE_OVERFLOW, "last")]
    assert hub.counters["outbox_dropped"] == 0


def test_a_full_outbox_drops_its_oldest_messages_and_counts_them(bus):
    make_hub, hub_loop, start = bus
    hub = make_hub(outbox_limit=100)
    client, loop, worker = start("A")
    for request_id in range(QUEUE_OVERFLOW):
        hub.send_to("A", bm.Query(request_id, WHAT))
    hub.send_to("A", bm.SetCost("A", 9))
    spin([hub_loop, loop], lambda: worker.of(bm.SetCost) and hub.counters["outbox_waiting"] == 0)
    received = worker.query_ids()
    dropped = hub.counters["outbox_dropped"]
    assert dropped > 0 and len(received) + dropped == QUEUE_OVERFLOW
    assert received == sorted(received) and received[-1] == QUEUE_OVERFLOW - 1   # the newest kept
    assert worker.of(bm.SetCost) == [bm.SetCost("A", 9)]     # state is never what the limit drops


def test_a_message_to_a_worker_not_connected_is_counted(bus):
    """A worker that is not connected (restarting) gets its state at its hello (the snapshot, the
    route table; its cost from the configuration it starts with): what was meant for the one that
    went is dropped, and counted."""
    make_hub, hub_loop, start = bus
    hub = make_hub()
    hub.send_to("gone", bm.SetCost("gone", 3))
    assert hub.counters["unreachable"] == 1 and hub.counters["outbox_waiting"] == 0


def _stalled(hub, start):
    """Worker A, which reads nothing while the hub sends it more than its queue holds: (its
    client, its loop, how many messages wait in its outbox)."""
    client, loop, worker = start("A")
    for request_id in range(QUEUE_OVERFLOW):
        hub.send_to("A", bm.Query(request_id, WHAT))
    waiting = hub.counters["outbox_waiting"]
    assert waiting > 0
    return client, loop, waiting


def test_a_worker_that_goes_down_stalled_leaves_no_outbox_behind(bus):
    make_hub, hub_loop, start = bus
    hub = make_hub()
    client, loop, waiting = _stalled(hub, start)
    hub.portal_down("A", 0)
    assert hub.counters["outbox_waiting"] == 0 and hub.counters["unreachable"] == waiting


def test_a_worker_restarted_under_its_name_gets_its_snapshot_not_what_waited_for_the_one_before(bus):
    make_hub, hub_loop, start = bus
    hub = make_hub()
    client, loop, waiting = _stalled(hub, start)
    client.close(), loop.close()                 # it died stalled; the supervisor restarts it
    _, _, restarted = start("A")
    assert restarted.of(bm.Snapshot) and not restarted.of(bm.Query), restarted.messages[:3]
    assert hub.counters["outbox_waiting"] == 0 and hub.counters["unreachable"] == waiting


def test_a_hub_that_does_not_read_loses_nothing_a_worker_sends(bus):
    """The worker's DEALER queue fills while the supervisor is busy: its interest must reach the
    hub, in order, once the hub reads again; whoever sent it must not get an exception."""
    make_hub, hub_loop, start = bus
    hub = make_hub()
    client, loop, worker = start("A")
    arrived = []
    hub.on_message = lambda identity, message: arrived.append(message.symbol)
    symbols = [f"{WHAT}.{number}" for number in range(QUEUE_OVERFLOW)]
    for symbol in symbols:                       # the hub reads none of them meanwhile
        client.send(bm.Interest("A", 1, bm.INTEREST_TOPIC, symbol, bm.OP_ADD))
    spin([hub_loop, loop], lambda: len(arrived) == len(symbols))
    assert arrived == symbols


def test_a_worker_whose_outbox_is_full_counts_what_it_drops(bus):
    make_hub, hub_loop, start = bus
    hub = make_hub()
    counters = PortalCounters()
    client, loop, worker = start("A", outbox_limit=100, on_dropped=lambda: counters.add("bus_messages_dropped"))
    arrived = []
    hub.on_message = lambda identity, message: arrived.append(message.symbol)
    symbols = [f"{WHAT}.{number}" for number in range(QUEUE_OVERFLOW)]
    for symbol in symbols + ["last"]:
        client.send(bm.Interest("A", 1, bm.INTEREST_TOPIC, symbol, bm.OP_ADD))
    spin([hub_loop, loop], lambda: arrived[-1:] == ["last"])
    dropped = counters.get("bus_messages_dropped")
    assert dropped > 0 and dropped == client.counters["outbox_dropped"]
    position = {symbol: number for number, symbol in enumerate(symbols)}
    kept = [position[symbol] for symbol in arrived[:-1]]
    assert len(kept) + dropped == QUEUE_OVERFLOW and kept == sorted(kept)
