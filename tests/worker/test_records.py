"""Ring records (router.worker.records): what one worker writes, another decodes, field for field;
a record too short for its header is a RecordError (counted and skipped by the reader)."""
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.worker import records as r

IPS = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
PORTS = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFFFFFF)
FRAMES = st.binary(min_size=4, max_size=300)


@given(U32, FRAMES)
def test_late_join_requests_round_trip(stream_id, message):
    assert r.decode_late_join(r.encode_late_join(stream_id, message)) == (stream_id, message)


@given(IPS, PORTS, FRAMES)
def test_late_join_answers_round_trip(ip, port, frames):
    assert r.decode_late_join_answer(r.encode_late_join_answer(ip, port, frames)) == (ip, port, frames)


@given(IPS, PORTS, U32, st.binary(max_size=100))
def test_responses_round_trip(ip, port, qidx, data):
    assert r.decode_response(r.encode_response(ip, port, qidx, data)) == (ip, port, qidx, data)


@given(U32, U32)
def test_sequence_info_round_trips(stream_id, sqn):
    assert r.decode_sequence_info(r.SEQUENCE_INFO_RECORD.pack(stream_id, sqn)) == (stream_id, sqn)


@pytest.mark.parametrize("decode, size", [(r.decode_late_join, 7), (r.decode_late_join_answer, 9),
                                          (r.decode_response, 9), (r.decode_sequence_info, 7)])
def test_a_record_shorter_than_its_header_and_a_frame_is_an_error(decode, size):
    with pytest.raises(r.RecordError):
        decode(bytes(size))


@given(st.booleans())
def test_stream_adverts_round_trip_with_the_late_join_flag(late_join):
    advert = r.StreamAdvert(7, "a.topic", bytes(range(32)), 3, 1, 2, "TCP:10.0.0.1:14371[1]", "LAN1", 9, late_join)
    assert r.StreamAdvert.decode(advert.encode()) == advert


def test_an_advert_without_the_late_join_flag_says_the_origin_offers_none():
    """A worker of the release before writes nine items: the flag defaults to False."""
    old = msgpack.packb([7, "a.topic", bytes(32), 3, 1, 2, "src", "LAN1", 9], use_bin_type=True)
    assert r.StreamAdvert.decode(old).late_join is False
