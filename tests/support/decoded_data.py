"""Which DATA datagrams of a joined LBT-RM or LBT-RU session went the whole way (decoded into a
packet and passed to the session's `packet`) rather than the steady state's shortcut
(router.um.session_socket: `in_order_data`)."""
from __future__ import annotations


def record_decoded_data(loop, client, data_type) -> list[int]:
    """Wrap `client.packet` (on its loop's thread) so that the sequence number of each `data_type`
    packet it is given is appended to the list returned, as it comes."""
    decoded: list[int] = []
    original = client.packet

    def packet(packet, now):
        if isinstance(packet, data_type):
            decoded.append(packet.sqn)
        original(packet, now)

    loop.call_and_wait(setattr, client, "packet", packet)
    return decoded
