"""routerctl run by a user the admin socket (mode 0600) does not admit: it says so, and does not
say that no router is running."""
import contextlib
import os
import socket
import tempfile

from router.cli import routerctl

NOBODY = 65534


@contextlib.contextmanager
def as_a_user_the_socket_does_not_admit(path: str):
    """The socket file without permissions; and root, whom permissions do not stop, as nobody."""
    os.chmod(path, 0)
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)


def test_routerctl_alone_names_the_socket_it_may_not_open_instead_of_saying_none_runs(monkeypatch, capsys):
    directory = tempfile.mkdtemp(prefix="umr-", dir="/tmp")
    os.chmod(directory, 0o755)                     # as systemd's RuntimeDirectoryMode=0755
    monkeypatch.setenv("RUNTIME_DIRECTORY", directory)
    path = os.path.join(directory, "guarded.admin")
    routerctl.build_parser()                       # every module loaded while they are readable
    try:
        with socket.socket(socket.AF_UNIX) as router:
            router.bind(path)
            router.listen()
            with as_a_user_the_socket_does_not_admit(path):
                code = routerctl.main(["status"])
    finally:
        os.unlink(path)
        os.rmdir(directory)
    error = capsys.readouterr().err
    assert code == routerctl.EXIT_UNREACHABLE, error
    assert "permission denied" in error and path in error, error
    assert "no running router" not in error, error
