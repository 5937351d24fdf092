"""A TCP source session takes the first free port of its range, even when other applications
start at the same moment and race it for the same ports."""
import threading

from router.um.tcp_source import TcpSourceSession


def test_sessions_starting_at_once_each_get_their_own_port(domain):
    """With SO_REUSEADDR two sockets can both bind a port nobody listens on yet, and only the first
    listen succeeds: the loser must move on to the next port, not fail. Threads stand in for
    applications; the kernel's rules are the same."""
    racers, rounds = 6, 30
    for _ in range(rounds):
        barrier = threading.Barrier(racers)
        listening, errors = [], []

        def start() -> None:
            barrier.wait()
            try:
                listening.append(TcpSourceSession._listen("127.0.0.1", domain.tcp_low, domain.tcp_high, 0))
            except OSError as err:
                errors.append(err)

        threads = [threading.Thread(target=start) for _ in range(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        ports = sorted(sock.getsockname()[1] for sock in listening)
        for sock in listening:
            sock.close()
        assert not errors, errors
        assert len(set(ports)) == racers and all(domain.tcp_low <= p <= domain.tcp_high for p in ports), ports
