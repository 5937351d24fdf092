"""When a portal starts queueing for receivers that do not keep up (or for a transport's rate
limit), and when the queue drains:
the DRO's "began enqueueing" (Gwd-6945-1) and "queue flushed" (Gwd-6945-3) lines. Pure logic.

A portal samples what waits for its receivers (not what is held for a first receiver, nor a
batch being filled) every quarter second; an episode begins at the first sample with bytes
waiting and ends at the first without. Under a stream that keeps a receiver at its limit the
queue may fill and drain many times a second, so a beginning is logged at most every `quiet`
seconds, with how many episodes went unlogged since, and an ending only for a logged beginning
(with how long it lasted and the most that waited). Drops beyond `<max-queue>` have their own
line (drops-would-block) and counters; `why_dropped` says in it what held the queue back.
"""
from __future__ import annotations

from typing import Callable


class QueueEpisodes:
    def __init__(self, log_event: Callable[[str, str], None], quiet: float = 10.0):
        self.log_event, self.quiet = log_event, quiet
        self.started: float | None = None       # the current episode's first sample
        self.most = 0                           # the most bytes it has had waiting
        self.logged = False                     # whether its beginning was logged
        self.last_logged = float("-inf")
        self.unlogged = 0                       # episodes begun, not logged, since the last logged one

    def sample(self, waiting: int, now: float) -> None:
        if waiting:
            if self.started is not None:
                self.most = max(self.most, waiting)
                return
            self.started, self.most = now, waiting
            self.logged = now - self.last_logged >= self.quiet
            if not self.logged:
                self.unlogged += 1
                return
            self.last_logged = now
            more = f"; {self.unlogged} shorter episode(s) since the last such line" if self.unlogged else ""
            self.unlogged = 0
            self.log_event("queue-began", f"began enqueueing: {waiting} bytes wait to be sent (a receiver is "
                                          f"slow, or the transport's rate limit holds them){more}")
        elif self.started is not None:
            if self.logged:
                self.log_event("queue-flushed", f"queue flushed after {now - self.started:.2f} s (at most "
                                                f"{self.most} bytes waited)")
            self.started = None

    def discarded(self, now: float, why: str) -> None:
        """The queue was thrown away, not sent (`why`: a peer link went down): the episode ends
        now, and its line says so rather than that the receivers caught up."""
        if self.started is not None:
            if self.logged:
                self.log_event("queue-flushed", f"queue ended after {now - self.started:.2f} s without draining "
                                                f"(at most {self.most} bytes waited): {why}")
            self.started = None


def why_dropped(sessions) -> str:
    """Why the queue of the proxy sources' `sessions` (those that just dropped) overflowed, for
    the drops-would-block line. An LBT-RM or LBT-RU session never waits for its receivers: what
    holds its queue back is its data rate limit, and an operator must look there, not at the
    receivers; a TCP or LBT-IPC session's queue fills when a receiver does not keep up."""
    reasons = []
    for session in sessions:
        option = getattr(session, "rate_limit_option", "")    # router.um.repairing_source's sessions
        if option and session.data_rate.rate:
            reasons.append(f"the {session.kind} rate limit ({option} {session.data_rate.rate * 8:.0f} bits/s) "
                           f"holds back what comes faster")
        else:
            reasons.append("a receiver is not keeping up")
    return "; ".join(dict.fromkeys(reasons)) or "a receiver is not keeping up"
