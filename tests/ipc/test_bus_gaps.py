"""A worker that falls behind the bus by more than ZeroMQ's high-water mark (stopped, a long GC, a
burst of interest) loses publications: PUB drops them and tells no one. Real ZeroMQ sockets, with
the high-water mark lowered so that a few thousand updates overflow it."""

import pytest
import zmq

from router.ipc import bus_messages as bm
from router.ipc.bus import BusClient, BusHub
from router.monitor.counters import PortalCounters
from router.um.loop import EventLoop
from tests.support.event_loops import spin

SMALL_HIGH_WATER_MARK = 10
LONG_SYMBOL = "x" * 200          # fills the kernel's socket buffers, behind ZeroMQ's queues, sooner


class Replica:
    """What a worker folds the bus into: interest, the portals that are up, the newest routes.
    A snapshot replaces all three, as it must in a worker."""

    def __init__(self):
        self.interest: set[tuple] = set()
        self.portals: dict[str, tuple[int, int]] = {}
        self.routes_version = -1
        self.last_interest_sequence = 0
        self.applied_twice_or_out_of_order: list[int] = []
        self.snapshots = 0
        self.went_down: list[tuple[str, int]] = []      # a worker ends its streams to their rings

    def on_message(self, message) -> None:
        if isinstance(message, bm.Snapshot):
            self.snapshots += 1
            self.interest = {_key(i) for i in message.interest}
            self.portals = {name: (index, generation) for name, index, generation in message.portals}
            self.last_interest_sequence = message.sequence
        elif isinstance(message, bm.Interest):
            if message.sequence <= self.last_interest_sequence:
                self.applied_twice_or_out_of_order.append(message.sequence)
            self.last_interest_sequence = message.sequence
            if message.op == bm.OP_CANCEL:
                self.interest.discard(_key(message))
            else:
                self.interest.add(_key(message))
        elif isinstance(message, bm.PortalUp):
            self.portals[message.portal] = (message.index, message.generation)
        elif isinstance(message, (bm.PortalDown, bm.PortalRemoved)):
            self.went_down.append((message.portal, message.index))
            self.portals.pop(message.portal, None)
        elif isinstance(message, bm.RouteTable):
            self.routes_version = max(self.routes_version, message.version)


def _key(interest: bm.Interest) -> tuple:
    return (interest.portal, interest.domain_id, interest.kind, interest.symbol)


@pytest.fixture
def small_bus(tmp_path):
    context = zmq.Context()
    hub_loop = EventLoop("hub")
    hub = BusHub(context, f"ipc://{tmp_path}/bus", f"ipc://{tmp_path}/bus-pub", hub_loop,
                 high_water_mark=SMALL_HIGH_WATER_MARK)
    loop = EventLoop("worker")
    replica = Replica()
    portal_counters = PortalCounters()          # as the worker counts them (routerctl stats, the portal page)
    client = BusClient(context, *hub.endpoints, "A", loop, replica.on_message,
                       on_gap=lambda: portal_counters.add("bus_update_gaps"), high_water_mark=SMALL_HIGH_WATER_MARK)
    client.hello(1, 100)
    spin([hub_loop, loop], lambda: replica.snapshots == 1)
    hub.portal_up("A", 0, 1)
    yield hub, hub_loop, client, loop, replica, portal_counters
    client.close()
    loop.close()
    hub.close()
    hub_loop.close()
    context.term()


def churn(hub: BusHub, first: int, count: int) -> None:
    """Interest of another portal coming and going: every third topic is cancelled again."""
    for number in range(first, first + count):
        topic = f"{LONG_SYMBOL}.{number}"
        hub.apply_interest(bm.Interest("B", 2, bm.INTEREST_TOPIC, topic, bm.OP_ADD))
        if number % 3 == 0:
            hub.apply_interest(bm.Interest("B", 2, bm.INTEREST_TOPIC, topic, bm.OP_CANCEL))


def in_step(hub: BusHub, replica: Replica) -> bool:
    return replica.interest == set(hub.interest) and replica.portals == hub.portals


def test_a_worker_past_the_high_water_mark_counts_the_gap_and_catches_up(small_bus):
    hub, hub_loop, client, loop, replica, portal_counters = small_bus
    churn(hub, 0, 5000)                # the worker reads nothing meanwhile: ZeroMQ drops some of it
    # It reads again while interest keeps changing, so its fresh snapshot races newer updates.
    for round_number in range(100):
        churn(hub, 5000 + round_number * 20, 20)
        loop.run_once(0)
        hub_loop.run_once(0)
    spin([hub_loop, loop], lambda: in_step(hub, replica))
    gaps = portal_counters.get("bus_update_gaps")
    assert gaps >= 1 and gaps == client.counters["gaps"] == hub.counters["resyncs"]   # routerctl status
    assert replica.applied_twice_or_out_of_order == []


def test_updates_lost_just_before_a_quiet_spell_are_noticed(small_bus):
    """The end of a burst the worker fell behind in: the last route table (which no snapshot holds)
    and a portal's restart reach it, whether a later publication or the hub's heartbeat shows the gap."""
    hub, hub_loop, client, loop, replica, portal_counters = small_bus
    churn(hub, 0, 5000)
    hub.portal_down("C", 3)
    hub.portal_up("C", 3, 2)
    hub.publish(bm.RouteTable(7, 1, ()))
    spin([hub_loop, loop], lambda: in_step(hub, replica) and replica.routes_version == 7)
    assert client.counters["gaps"] >= 1


def test_a_lost_last_update_shows_at_the_next_heartbeat(small_bus):
    """Deterministically what the test above may or may not meet: the very last publications are
    the lost ones, and nothing else is published. The hub's state changes under numbers the worker
    never gets, as when ZeroMQ drops them."""
    hub, hub_loop, client, loop, replica, portal_counters = small_bus
    spin([hub_loop, loop], lambda: in_step(hub, replica))
    hub.sequence += 1                               # a PortalUp, dropped on the way
    hub.portals["C"] = (3, 1)
    spin([hub_loop, loop], lambda: in_step(hub, replica))
    assert portal_counters.get("bus_update_gaps") == 1 and client.counters["updates_missed"] == 1


def test_a_portal_that_went_down_unseen_is_told_as_down_after_the_snapshot(small_bus):
    """The snapshot lists only the portals that are up: one the worker knew that is missing from
    it (or is there restarted) went down meanwhile, and the worker must end its streams to it."""
    hub, hub_loop, client, loop, replica, portal_counters = small_bus
    hub.portal_up("C", 3, 1)
    spin([hub_loop, loop], lambda: in_step(hub, replica))
    hub.sequence += 1                               # its PortalDown, dropped on the way
    del hub.portals["C"]
    spin([hub_loop, loop], lambda: in_step(hub, replica))
    assert replica.went_down == [("C", 3)]


def test_a_snapshot_lost_on_its_way_is_asked_for_again(small_bus):
    """A request or its answer can still be lost (the worker reconnected meanwhile, and the hub
    keeps nothing for a worker that is not connected): the worker, holding every update until the
    snapshot comes, would wait for good. Here the hub never sees the first request."""
    hub, hub_loop, client, loop, replica, portal_counters = small_bus
    spin([hub_loop, loop], lambda: in_step(hub, replica))
    answered = hub._handle
    lost = []

    def lose_the_first_resync(frames):
        if not lost and isinstance(bm.decode(frames[-1]), bm.Resync):
            lost.append(frames)
            return
        answered(frames)
    hub._handle = lose_the_first_resync
    hub.sequence += 1                               # a PortalUp, dropped on the way
    hub.portals["C"] = (3, 1)
    spin([hub_loop, loop], lambda: in_step(hub, replica), timeout=30.0)
    assert lost and client.counters["resync_retries"] == 1 and hub.counters["resyncs"] == 1


def test_a_second_answer_to_a_request_asked_again_does_not_undo_newer_updates(small_bus):
    """Both answers come when the first was only late: the worker has applied updates past the
    first, which the second may predate."""
    hub, hub_loop, client, loop, replica, portal_counters = small_bus
    hub.apply_interest(bm.Interest("B", 2, bm.INTEREST_TOPIC, "early", bm.OP_ADD))
    late_answer = hub.snapshot()
    hub.apply_interest(bm.Interest("B", 2, bm.INTEREST_TOPIC, "later", bm.OP_ADD))
    spin([hub_loop, loop], lambda: in_step(hub, replica))
    stale_before = client.counters["stale_updates"]
    hub._reply(b"A", late_answer)
    spin([hub_loop, loop], lambda: client.counters["stale_updates"] > stale_before)
    # Loaded, it would have rolled the worker back, and only the next gap would have mended it.
    assert in_step(hub, replica) and client.counters["gaps"] == 0
