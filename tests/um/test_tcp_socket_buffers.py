"""transport_tcp_sender_socket_buffer and transport_tcp_receiver_socket_buffer size the kernel
buffers of an LBT-TCP session's connections, live on loopback (the kernel doubles what is asked,
for its own bookkeeping)."""
import socket

from router.um.context import Context
from tests.support.processes import wait_for


def _buffers(publisher: Context, subscriber: Context, topic: str) -> tuple[int, int]:
    """The SO_SNDBUF of the source's connection and the SO_RCVBUF of the receiver's, once joined."""
    subscriber.receiver(topic, lambda message: None)
    source = publisher.source(topic)
    # Each side sees the connection on its own thread: the source may count it before the
    # receiver's context lists it (it did, in one CI run).
    wait_for(lambda: source.receiver_count >= 1 and subscriber.clients, 10, message="receiver joins")
    [connection] = source.session.connections
    [client] = subscriber.clients.values()
    return (connection.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            client.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))


def test_the_options_set_each_side_s_kernel_buffer(domain):
    with Context(**domain.overrides(), transport_tcp_sender_socket_buffer=65536) as publisher, \
            Context(**domain.overrides(), transport_tcp_receiver_socket_buffer=98304) as subscriber:
        assert _buffers(publisher, subscriber, "buffers.set") == (2 * 65536, 2 * 98304)


def test_by_default_the_receiver_asks_4_mib_and_the_source_leaves_the_kernel_s(domain):
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        kernel_default_send = int(f.read().split()[1])
    with open("/proc/sys/net/core/rmem_max") as f:
        receive_cap = int(f.read())
    with Context(**domain.overrides()) as publisher, Context(**domain.overrides()) as subscriber:
        sent, received = _buffers(publisher, subscriber, "buffers.default")
    assert received == 2 * min(4 * 1024 * 1024, receive_cap)
    assert sent >= kernel_default_send          # the kernel's, growing as it likes
