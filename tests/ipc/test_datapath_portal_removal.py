"""A worker's data path when a reload removes a portal and a later one adds a portal that takes its
index: the worker, forked while the old portal's ring existed, must let go of that ring (its memory
is freed only when the last process unmaps it) and read the new portal's ring, not the old one."""
import copy
import glob
import os
import uuid

import pytest

from router.ipc.ring_producer import RingProducer
from router.ipc.shm import SharedSegment
from router.monitor.counters import PortalCounters
from router.um.loop import EventLoop
from router.worker.datapath import DataPath, DataPathSpec, RingSet
from router.worker.records import RECORD_FRAMES, encode_frames
from tests.support.peer_links import routerctl
from tests.router.test_reload_adversarial import alive, all_up, delivers, lans, pids_of, reload_ok, rewrite
from tests.support.processes import wait_for
from tests.support.routers import FAST_ROUTING, endpoint_xml

_DEADLINE = 10.0


def _worker_of_portal_0(ring_set: RingSet, commands, replies) -> None:
    """Portal E0's worker: runs its data path, detaches and attaches ring 1 when told (the bus's
    PortalRemoved and PortalUp), and reports the frames it read."""
    loop = EventLoop("worker-E0")
    path = DataPath(DataPathSpec(ring_set, {"E0": 0, "E1": 1}), 0, loop, PortalCounters())
    got = []
    path.handler = lambda ring, record_type, payload, now=False: got.append((ring, bytes(payload)))

    def command() -> None:
        what = commands.recv()
        if what == "detach":
            path.detach(1)
        elif what == "attach":
            path.attach(1)
        replies.send(what)

    loop.add_reader(commands.fileno(), command)
    replies.send("ready")
    loop.run_until(lambda: bool(got), 30)
    replies.send(got)


def _maps_ring(pid: int, name: str) -> bool:
    with open(f"/proc/{pid}/maps") as maps:
        return any(line.rstrip().endswith(f"/dev/shm{name} (deleted)") or line.rstrip().endswith(f"/dev/shm{name}")
                   for line in maps)


def _reply(replies):
    assert replies.poll(_DEADLINE), "the worker did not answer"
    return replies.recv()


def test_a_portal_added_at_a_removed_portals_index_reaches_a_worker_forked_before(fork_context, processes):
    ring_set = RingSet(f"t{uuid.uuid4().hex[:10]}", capacity=64 * 1024)
    commands, worker_commands = fork_context.Pipe()
    worker_replies, replies = fork_context.Pipe()
    producer = None
    try:
        ring_set.create(0)
        ring_set.create(1)
        worker = fork_context.Process(target=_worker_of_portal_0, args=(ring_set, worker_commands, worker_replies))
        worker.start()
        processes.append(worker)
        assert _reply(replies) == "ready"

        old_ring = ring_set.name(1)
        ring_set.remove(1)                           # a reload removes E1: the supervisor unlinks its ring
        commands.send("detach")                      # and the worker hears PortalRemoved
        assert _reply(replies) == "detach"
        assert not _maps_ring(worker.pid, old_ring), "the removed portal's ring stays mapped in the worker"

        ring_set.create(1)                           # a later reload adds a portal at index 1
        commands.send("attach")                      # the worker hears PortalUp
        assert _reply(replies) == "attach"
        producer = RingProducer(ring_set.segments[1].memory, wakeups=ring_set.wakeups(1))
        wait_for(producer.live_consumers, _DEADLINE, interval=0.001,
                 message="the worker to attach to the new portal's ring")
        assert producer.offer(RECORD_FRAMES, encode_frames(5, b"to E0", 1, 5), 0b01)
        got = _reply(replies)
        assert got == [(1, encode_frames(5, b"to E0", 1, 5))]
        worker.join(_DEADLINE)
    finally:
        if producer is not None:
            producer.close()
        commands.close()
        replies.close()
        ring_set.close()


def test_portals_sharing_a_worker_let_go_of_a_removed_ring_once_neither_reads_it():
    """A `<worker-group>`: two portals of one process read the removed portal's ring; the first to
    detach leaves it to the other, which goes on reading, and the last lets the mapping go."""
    ring_set = RingSet(f"t{uuid.uuid4().hex[:10]}", capacity=64 * 1024)
    loop = EventLoop("worker-group")
    paths = []
    try:
        for index in range(3):
            ring_set.create(index)
        worker_rings = copy.copy(ring_set)            # the worker's own mappings, as a forked one has
        worker_rings.segments = {index: SharedSegment.attach(ring_set.name(index)) for index in range(3)}
        spec = DataPathSpec(worker_rings, {"E0": 0, "E1": 1, "E2": 2})
        paths = [DataPath(spec, 0, loop, PortalCounters()), DataPath(spec, 2, loop, PortalCounters())]
        got = []
        paths[1].handler = lambda ring, record_type, payload, now=False: got.append(bytes(payload))
        removed = ring_set.name(1)
        with SharedSegment.attach(removed) as removed_portals_mapping:      # E1's worker, stopping
            with RingProducer(removed_portals_mapping.memory) as producer:
                ring_set.remove(1)
                paths[0].detach(1)
                assert producer.offer(RECORD_FRAMES, b"still read", 0b100)
        assert loop.run_until(lambda: got == [b"still read"], _DEADLINE)
        assert _maps_ring(os.getpid(), removed)
        paths[1].detach(1)
        assert not _maps_ring(os.getpid(), removed)
    finally:
        for path in paths:
            path.close()
        loop.close()
        ring_set.close()


@pytest.mark.integration
def test_a_portal_added_where_a_removed_one_was_reaches_the_portals_that_stayed(routers, tools, make_domain):
    """The same on a running router: LAN3 is removed, and a later reload adds LAN4, which takes
    LAN3's ring index. Messages from LAN4's domain reach LAN1's (they were read from LAN3's
    unlinked ring by LAN1's worker, and never arrived)."""
    lan1, lan2, lan3, lan4 = make_domain(), make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3]), FAST_ROUTING).wait_ready()
    pids = pids_of(router)
    rewrite(router, lans([lan1, lan2]), FAST_ROUTING)
    assert reload_ok(router)["removed"] == ["LAN3"]
    wait_for(lambda: not alive(pids["LAN3"]), 20, message="LAN3's process gone (its ring index free)")
    rewrite(router, lans([lan1, lan2]) + endpoint_xml("LAN4", 4, lan4.config_path), FAST_ROUTING)
    assert reload_ok(router)["added"] == ["LAN4"]
    wait_for(lambda: all_up(router, ["LAN1", "LAN2", "LAN4"]), 20, message="LAN4 up")
    segments = glob.glob(f"/dev/shm/umr.{router.name}.{router.pid}.ring*")
    rings = sorted(path.rsplit(".", 1)[1] for path in segments)
    assert rings == ["ring0", "ring1", "ring2"]           # LAN4 has LAN3's index
    wait_for(lambda: routerctl(router, "topology")["domains"] == [1, 2, 4], 10, message="domain 4 in the map")
    delivers(tools, lan4, lan1, "readd.index.back")
    assert pids_of(router)["LAN1"] == pids["LAN1"]      # the worker forked while LAN3's ring existed
