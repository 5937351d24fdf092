"""LBMC control headers of late join (UM's lbm_late_join; Wireshark's packet-lbmc.c layouts).

A receiver that joins a source offering late join (the TIR's LATEJOIN option names the source
context's request port) asks it over a UIM connection, and the answers come back the same way:

    LJI_REQ (0x4E)      request_idx, transport_idx, topic_idx, req_ip/req_port (where to answer),
                        tx_low_sqn, rx_req_max, rx_req_outstanding_max; flags say which of the last
                        three are present (L 0x1, M 0x2, O 0x4)
    UME_LJ_INFO (0x1E)  low_seqnum..high_seqnum the source still retains; qidx = the request_idx
    UME_RXREQ (0x15)    one retained message asked for: seqnum of topic index id_2, to be sent to
                        rx_ip/rx_port

Each retransmitted message is an LBMC RETRANS (0x0A) message: the MESSAGE the source sent then,
with its topic index, sequence number and FRAG header, only the type changed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from router.um.wire import lbmc_constants as c
from router.um.wire._codec import Layout
from router.um.wire.lbmc_headers import FixedHeader

LJI_LOW_SQN = 0x1                   # tx_low_sqn is present
LJI_RX_REQ_MAX = 0x2                # rx_req_max is present
LJI_RX_REQ_OUTSTANDING_MAX = 0x4    # rx_req_outstanding_max is present


@dataclass(slots=True)
class LjiRequest(FixedHeader):
    request_idx: int
    transport_idx: int
    topic_idx: int
    req_ip: str
    req_port: int
    tx_low_sqn: int = 0
    rx_req_max: int = 0
    rx_req_outstanding_max: int = 0
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_LJI_REQ
    LAYOUT: ClassVar[Layout] = Layout("flags:H request_idx:I transport_idx:I topic_idx:I req_ip:ip req_port:H x2 "
                                      "tx_low_sqn:I rx_req_max:I rx_req_outstanding_max:I")


@dataclass(slots=True)
class UmeLjInfo(FixedHeader):
    low_seqnum: int
    high_seqnum: int
    qidx: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_UME_LJ_INFO
    LAYOUT: ClassVar[Layout] = Layout("flags:H low_seqnum:I high_seqnum:I qidx:I")


@dataclass(slots=True)
class UmeRxReq(FixedHeader):
    request_idx: int
    transport_idx: int
    id_2: int                       # the topic index (a persistent receiver's registration id in UMP)
    seqnum: int
    rx_port: int
    rx_ip: str
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_UME_RXREQ
    LAYOUT: ClassVar[Layout] = Layout("flags:H request_idx:I transport_idx:I id_2:I seqnum:I rx_port:H x2 rx_ip:ip")


LATE_JOIN_HEADERS = (LjiRequest, UmeLjInfo, UmeRxReq)
