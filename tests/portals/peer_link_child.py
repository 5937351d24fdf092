"""A peer-link acceptor in its own process, for tests that SIGSTOP the far end.

    python -m tests.portals.peer_link_child NAME NODE_ID INTERVAL_MS TIMEOUT_MS

Prints ``PORT <n>`` once listening, then ``UP <name> <node id>`` / ``DOWN <reason>`` as the link
changes, and runs until killed.
"""
import sys

from router.config.model import Acceptor, GatewayKeepalive, PeerConfig, SingleTcpLink
from router.portals.peer_link import PeerLink
from router.um.loop import EventLoop


def main() -> None:
    name, node_id, interval, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    config = PeerConfig(name=f"{name}-peer", link=SingleTcpLink(acceptor=Acceptor(0), nodelay=True),
                        gateway_keepalive=GatewayKeepalive(interval, timeout, True))
    loop = EventLoop(name)
    link = PeerLink(config, loop, name, node_id,
                    on_up=lambda peer, node: print(f"UP {peer} {node}", flush=True),
                    on_down=lambda reason: print(f"DOWN {reason}", flush=True),
                    handshake_timeout_ms=1000)
    link.start()
    print(f"PORT {link.listening_port}", flush=True)
    loop.run_forever()


if __name__ == "__main__":
    main()
