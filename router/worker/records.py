"""What workers put in the shared-memory rings: stream advertisements, data fragments, end of stream.

An ingress portal gives each source it receives a stream id and announces it in-band (ADVERT)
before any of its data, so an egress portal never sees data for a source it has not heard of.
Data records carry the source's own sequence numbers and fragment fields unchanged: the egress
proxy source re-sends each fragment as it came (the DRO forwards fragments; it does not
reassemble), and one larger than the egress datagram size is dropped and counted.

    ADVERT  msgpack [stream_id, topic, otid, cost, hop_count, origin_domain_id, source, origin_portal]
    DATA    >IIIII  stream_id, sqn, first_sqn, frag_offset, total_length (+ payload)
                    a whole message has frag_offset = 0, total_length = payload length, first_sqn = sqn
                    and the FLAG bit clear in RECORD_DATA vs RECORD_FRAGMENT
    EOS     >I      stream_id
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import msgpack

RECORD_ADVERT = 1
RECORD_DATA = 2
RECORD_FRAGMENT = 3
RECORD_EOS = 4

DATA_HEADER = struct.Struct(">IIIII")
EOS_RECORD = struct.Struct(">I")


class RecordError(ValueError):
    """A ring record that does not decode (a bug or a corrupted segment; counted, skipped)."""


@dataclass(frozen=True, slots=True)
class StreamAdvert:
    stream_id: int
    topic: str
    otid: bytes
    cost: int              # cost so far: the origin's advertised cost plus every portal crossed
    hop_count: int
    origin_domain_id: int
    source: str            # the source string seen at the ingress, for logs and monitoring
    origin_portal: str

    def encode(self) -> bytes:
        return msgpack.packb([self.stream_id, self.topic, self.otid, self.cost, self.hop_count,
                              self.origin_domain_id, self.source, self.origin_portal], use_bin_type=True)

    @classmethod
    def decode(cls, data) -> "StreamAdvert":
        try:
            items = msgpack.unpackb(bytes(data), raw=False)
            advert = cls(*items)
        except Exception as err:    # msgpack raises several types for bad input
            raise RecordError(f"bad stream advertisement: {err}") from None
        if not isinstance(advert.topic, str) or not isinstance(advert.otid, bytes) or len(advert.otid) != 32:
            raise RecordError("bad stream advertisement: topic or OTID has the wrong type")
        return advert


def decode_data_header(payload) -> tuple[int, int, int, int, int]:
    if len(payload) < DATA_HEADER.size:
        raise RecordError(f"data record of {len(payload)} bytes is shorter than its header")
    return DATA_HEADER.unpack_from(payload)


def decode_eos(payload) -> int:
    if len(payload) < EOS_RECORD.size:
        raise RecordError("end-of-stream record is too short")
    return EOS_RECORD.unpack_from(payload)[0]
