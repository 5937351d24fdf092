"""Finding an LBT-IPC session's segment by name (router.lbtipc.naming.find_segment): what a
receiver, or a router's proxy receiver, does at every join of a session, for months."""
import os
import random
import tracemalloc

from router.lbtipc import naming


def _unique_xport_id() -> int:
    # Far above transport_lbtipc_id_high's default range: no live session of another test has it.
    return 1_000_000 + random.randrange(1_000_000)


def test_finding_sessions_keeps_nothing_per_session():
    """Each session joined has ids of its own; looking them up kept a compiled pattern per
    session (glob's cache, up to 32768 of them: about 27 MB in a router whose LBT-IPC sources
    restart often)."""
    xport_id = _unique_xport_id()
    for session_id in range(200):                   # what any first use allocates for good
        naming.find_segment(xport_id, session_id)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for session_id in range(200, 5200):
            assert naming.find_segment(xport_id, session_id) is None
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, f"{grown} bytes kept after looking up 5000 sessions"


def test_a_file_named_like_a_session_without_an_owner_pid_is_passed_over():
    """Anyone can create files in /dev/shm: one named like a session but with no pid where the
    owner's goes is not a session (it raised ValueError out of the join)."""
    xport_id, session_id = _unique_xport_id(), random.randrange(1 << 32)
    name = naming.session_name(xport_id, session_id)
    stray = f"{naming.SHM_DIRECTORY}/umr.{naming.OWNER}.nobody.{name}"
    live = f"{naming.SHM_DIRECTORY}/umr.{naming.OWNER}.{os.getpid()}.{name}"
    try:
        open(stray, "w").close()
        assert naming.find_segment(xport_id, session_id) is None
        open(live, "w").close()
        assert naming.find_segment(xport_id, session_id) == f"/umr.{naming.OWNER}.{os.getpid()}.{name}"
    finally:
        for path in (stray, live):
            if os.path.exists(path):
                os.unlink(path)
