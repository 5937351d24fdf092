"""router.portals.queue_episodes: a portal's queue filling and draining, logged as the DRO does."""
from router.portals.queue_episodes import QueueEpisodes


def test_an_episode_is_logged_when_it_begins_and_when_it_drains():
    lines = []
    episodes = QueueEpisodes(lambda name, text: lines.append((name, text)), quiet=10.0)
    episodes.sample(0, 0.0)
    assert lines == []
    episodes.sample(5000, 1.0)
    episodes.sample(90000, 1.25)
    episodes.sample(20000, 1.5)
    episodes.sample(0, 3.0)
    assert lines == [("queue-began", "began enqueueing: 5000 bytes wait to be sent (a receiver is slow, or the "
                                     "transport's rate limit holds them)"),
                     ("queue-flushed", "queue flushed after 2.00 s (at most 90000 bytes waited)")]


def test_episodes_close_together_are_logged_once_with_a_count():
    lines = []
    episodes = QueueEpisodes(lambda name, text: lines.append(name + ": " + text), quiet=10.0)
    for start in (0.0, 2.0, 4.0, 6.0):           # four short episodes within 10 s: one line pair
        episodes.sample(100, start)
        episodes.sample(0, start + 0.5)
    assert [line.split(":")[0] for line in lines] == ["queue-began", "queue-flushed"]
    episodes.sample(100, 12.0)                     # 12 s after the logged one: logged, with the count
    assert lines[-1].startswith("queue-began") and lines[-1].endswith("3 shorter episode(s) since the last such line")
    episodes.sample(0, 12.25)
    episodes.sample(100, 13.0)                     # and the count starts again
    episodes.sample(100, 30.0)                     # still the same episode: nothing new
    episodes.sample(0, 31.0)
    episodes.sample(100, 32.0)
    assert lines[-1].startswith("queue-began") and lines[-1].endswith("1 shorter episode(s) since the last such line")


def test_a_queue_thrown_away_ends_its_episode_saying_so():
    lines = []
    episodes = QueueEpisodes(lambda name, text: lines.append((name, text)), quiet=10.0)
    episodes.sample(7000, 1.0)
    episodes.discarded(2.5, "the connection closed")
    assert lines[-1] == ("queue-flushed", "queue ended after 1.50 s without draining (at most 7000 bytes "
                                          "waited): the connection closed")
    episodes.sample(0, 3.0)                        # the next empty sample says nothing more
    episodes.discarded(4.0, "the connection closed")
    assert len(lines) == 2
