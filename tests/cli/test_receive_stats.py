"""The example receivers' delivery statistics: whatever the batching, the same counts as taking
the messages one at a time in the plain way (runs in sequence are followed in locals)."""
from hypothesis import given
from hypothesis import strategies as st

from router.cli import payload
from router.cli.receive_stats import ReceiveStats
from router.um.messages import Message

TOPICS = ("a", "b")


def _message(source_id: int, seq: int, topic: str) -> Message:
    buffer = payload.make_buffer(32)
    payload.pack_into(buffer, 0, source_id, seq, 0)
    return Message(topic, f"src{source_id}", seq, bytes(buffer))


def _plain(messages) -> dict:
    """Each message on its own: received, unique, duplicates, out of order, missing, last, topics."""
    sources = {}
    for m in messages:
        source_id, seq, _ = payload.HEADER.unpack_from(m.data)
        s = sources.setdefault(source_id, {"received": 0, "unique": 0, "duplicates": 0, "out_of_order": 0,
                                           "gap_events": 0, "next": seq, "missing": set(), "first": seq,
                                           "last": seq, "topics": set()})
        s["received"] += 1
        s["topics"].add(m.topic)
        if seq >= s["next"]:
            if seq > s["next"]:
                s["gap_events"] += 1
                s["missing"].update(range(s["next"], seq))
            s["unique"] += 1
            s["next"], s["last"] = seq + 1, seq
        elif seq in s["missing"]:
            s["missing"].discard(seq)
            s["unique"] += 1
            s["out_of_order"] += 1
        else:
            s["duplicates"] += 1
    return {f"{source_id:08x}": {"received": s["received"], "unique": s["unique"], "duplicates": s["duplicates"],
                                 "gaps": len(s["missing"]), "gap_events": s["gap_events"],
                                 "out_of_order": s["out_of_order"], "first_seq": s["first"], "last_seq": s["last"],
                                 "topics": sorted(s["topics"])}
            for source_id, s in sources.items()}


# Mostly runs in sequence (the case followed in locals), with jumps back and forth, repeats,
# other sources and other topics mixed in.
steps = st.lists(st.tuples(st.sampled_from([1, 1, 1, 2]), st.sampled_from([1, 1, 1, 1, 0, 2, -3, 5]),
                           st.sampled_from(TOPICS + ("a",) * 4)), max_size=150)


@given(steps, st.lists(st.integers(1, 20), min_size=1, max_size=10))
def test_counts_do_not_depend_on_batching_and_match_the_plain_way(steps, cuts):
    seqs = {1: 100, 2: 0}
    messages = []
    for source_id, step, topic in steps:
        seqs[source_id] = max(0, seqs[source_id] + step)
        messages.append(_message(source_id, seqs[source_id], topic))
    stats = ReceiveStats()
    position, turn = 0, 0
    while position < len(messages):
        size = cuts[turn % len(cuts)]
        stats.on_batch(messages[position:position + size])
        position, turn = position + size, turn + 1
    summary = stats.summary()
    assert summary["per_source"] == _plain(messages)
    assert summary["received"] == len(messages)
    assert summary["unique"] == sum(s["unique"] for s in summary["per_source"].values())
    assert len(stats.latencies_ns) == len(messages)


def test_a_short_payload_is_counted_malformed_and_the_run_around_it_is_whole():
    stats = ReceiveStats()
    batch = [_message(1, 0, "a"), _message(1, 1, "a"), Message("a", "src1", 2, b"short"),
             _message(1, 2, "a"), _message(1, 3, "a")]
    stats.on_batch(batch)
    summary = stats.summary()
    assert summary["malformed"] == 1
    assert summary["per_source"]["00000001"]["unique"] == 4 and summary["gaps"] == 0
    assert summary["per_source"]["00000001"]["last_seq"] == 3


def test_a_payload_saying_a_sequence_number_billions_ahead_is_counted_not_listed():
    """A payload umsrc did not make can claim any number: the jump is counted as missing without
    a set of billions of numbers (which would take all memory)."""
    stats = ReceiveStats()
    stats.on_batch([_message(1, 0, "a"), _message(1, 2**40, "a"), _message(1, 2**40 + 1, "a"), _message(1, 5, "a")])
    summary = stats.summary()
    per_source = summary["per_source"]["00000001"]
    assert summary["gaps"] == 2**40 - 1 and per_source["gap_events"] == 1
    assert per_source["unique"] == 3 and per_source["duplicates"] == 1       # 5: given up with the jump
    assert len(stats.sources[1].missing) == 0


def _stamped(source_id: int, seq: int, topic: str, length: int = 64) -> Message:
    """A message whose send time is its number times 7 (a latency then tells which batch it was in)."""
    buffer = payload.make_buffer(max(length, payload.MINIMUM_LENGTH))
    payload.pack_into(buffer, 0, source_id, seq, seq * 7)
    return Message(topic, f"src{source_id}", seq, bytes(buffer[:length]))


# Long runs in sequence (whole batches of them are counted at once), broken now and then by a
# jump, a repeat, another source, another topic, another length or a payload too short to read.
long_runs = st.lists(st.tuples(st.integers(1, 400), st.sampled_from([1, 1, 2]), st.sampled_from([1, 0, 3, -5, 1000]),
                               st.sampled_from(["a", "a", "a", "b"]), st.sampled_from([64, 64, 64, 32, 10])),
                     max_size=12)


@given(long_runs, st.lists(st.integers(1, 500), min_size=1, max_size=6))
def test_batches_of_long_runs_count_as_the_plain_way_and_keep_each_latency(runs, cuts):
    seqs = {1: 0, 2: 50}
    messages = []
    for run_length, source_id, jump, topic, length in runs:
        seqs[source_id] = max(0, seqs[source_id] + jump)
        for _ in range(run_length):
            messages.append(_stamped(source_id, seqs[source_id], topic, length))
            seqs[source_id] += 1
    stats = ReceiveStats()
    batches, position, turn = [], 0, 0
    while position < len(messages):
        batches.append(messages[position:position + cuts[turn % len(cuts)]])
        stats.on_batch(batches[-1])
        position, turn = position + len(batches[-1]), turn + 1
    readable = [m for m in messages if len(m.data) >= payload.MINIMUM_LENGTH]
    summary = stats.summary()
    assert summary["per_source"] == _plain(readable)
    assert (summary["received"], summary["malformed"]) == (len(messages), len(messages) - len(readable))
    # Each readable message's latency, in order, is its batch's clock reading less its send time.
    latencies = iter(stats.latencies_ns)
    clocks = [{next(latencies) + m.sequence_number * 7 for m in batch if len(m.data) >= payload.MINIMUM_LENGTH}
              for batch in batches]
    assert all(len(clock) <= 1 for clock in clocks)
    assert next(latencies, None) is None


def test_a_batch_in_sequence_after_a_gap_is_counted_whole_and_the_gap_stays_missing():
    stats = ReceiveStats()
    stats.on_batch([_stamped(1, seq, "a") for seq in range(100)])
    stats.on_batch([_stamped(1, seq, "a") for seq in range(150, 400)])
    stats.on_batch([_stamped(1, seq, "a") for seq in range(400, 600)])
    per_source = stats.summary()["per_source"]["00000001"]
    assert (per_source["unique"], per_source["gaps"], per_source["last_seq"]) == (550, 50, 599)
    assert len(stats.latencies_ns) == 550


def test_a_whole_batch_counts_at_once_only_as_one_sources_next_messages_with_their_topic():
    """Another source's message among them with the number this one expects, or a new topic for
    a source, is counted as the plain way counts it."""
    first = [_stamped(1, seq, "a") for seq in range(100)]
    new_topic = [_stamped(1, seq, "b") for seq in range(100, 200)]
    mixed = [_stamped(2 if seq == 250 else 1, seq, "a") for seq in range(200, 300)]
    stats = ReceiveStats()
    for batch in (first, new_topic, mixed):
        stats.on_batch(batch)
    summary = stats.summary()
    assert summary["per_source"] == _plain(first + new_topic + mixed)
    assert summary["per_source"]["00000001"]["topics"] == ["a", "b"]
    assert summary["per_source"]["00000001"]["gaps"] == 1 and summary["per_source"]["00000002"]["unique"] == 1
