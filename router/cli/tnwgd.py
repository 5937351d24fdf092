"""tnwgd: the router daemon (UM Dynamic Routing Option), as in the DRO's own man page.

    tnwgd [-d|--dump-dtd] [-v|--validate] [-f|--detach] [-u|--use-utc] [-h] CONFIG.xml

Exit status: 0 success; 2 invalid configuration (the message names file, line and element), or a
pidfile that cannot be written or that a running tnwgd holds; 3 a portal could not start; 1 anything
else. With -f the shell gets 0 once the detached daemon has written its pidfile, or 2 and the reason.
"""
from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import sys

from router.cli.common import exits_quietly
from router.config import ConfigError, dump_dtd, load_gateway_config, validate_structure


# The exit status of an invalid configuration (router.supervisor.EXIT_CONFIG_ERROR): systemd's unit
# does not restart on it.
EXIT_CONFIG_ERROR = 2
# What a detached daemon tells the waiting parent when its pidfile is written.
_DETACHED = b"\0"

# Blocked from the pidfile's writing until the supervisor's handlers are in place.
STARTUP_SIGNALS = frozenset({signal.SIGHUP, signal.SIGTERM, signal.SIGINT})


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tnwgd", description="UM router daemon (Dynamic Routing Option).")
    parser.add_argument("-d", "--dump-dtd", action="store_true", help="print the configuration DTD and exit")
    parser.add_argument("-v", "--validate", action="store_true",
                        help="validate the configuration file and exit (0 = valid)")
    parser.add_argument("-f", "--detach", action="store_true", help="run in the background (daemonize)")
    parser.add_argument("-u", "--use-utc", action="store_true", help="log timestamps in UTC")
    parser.add_argument("configfile", nargs="?")
    return parser.parse_args(argv)


@exits_quietly
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dump_dtd:
        sys.stdout.write(dump_dtd())
        return 0
    if not args.configfile:
        print("tnwgd: a configuration file is required (tnwgd -h for help)", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        if args.validate:
            validate_structure(args.configfile)
            load_gateway_config(args.configfile)       # semantics too: a valid file must run
            print(f"{args.configfile}: valid")
            return 0
        config = load_gateway_config(args.configfile)
    except ConfigError as err:
        print(f"tnwgd: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except OSError as err:
        print(f"tnwgd: {args.configfile}: {err.strerror}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    from router.eventlog import configure_logging
    log_config = config.daemon.log
    configure_logging(log_config.type, log_config.path, args.use_utc, frequency=log_config.frequency,
                      size=log_config.size)
    # From here on the daemon leaves things behind (the pidfile, then the supervisor's sockets and
    # segments): a stop, a Ctrl-C or a reload asked for before the supervisor handles signals waits
    # until it does (Supervisor._install_signals unblocks them), instead of killing it on the spot.
    signal.pthread_sigmask(signal.SIG_BLOCK, STARTUP_SIGNALS)
    if args.detach:
        _daemonize(config.daemon.pidfile)
    elif config.daemon.pidfile:
        try:
            _write_pidfile(config.daemon.pidfile)
        except OSError as err:
            print(f"tnwgd: {_pidfile_error(config.daemon.pidfile, err)}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
    try:
        return _run(args, config)
    finally:
        if config.daemon.pidfile:
            _remove_pidfile(config.daemon.pidfile)


def _run(args: argparse.Namespace, config) -> int:
    log_config = config.daemon.log
    from router.open_files import raise_open_files_limit
    raised = raise_open_files_limit()
    if raised:
        logging.getLogger("router.daemon").info(raised)
    cpu_latency = None
    if config.daemon.cpu_latency_limit is not None:    # the device is root's: opened before root is given up
        from router.cpu_latency import CpuLatencyLimit
        cpu_latency = CpuLatencyLimit.hold(config.daemon.cpu_latency_limit)
    from router.identity import IdentityError, switch_identity
    try:
        switched = switch_identity(config.daemon.uid, config.daemon.gid,
                                   log_config.path if log_config.type == "file" else None,
                                   log_rolls=log_config.frequency != "disable" or bool(log_config.size))
    except IdentityError as err:
        print(f"tnwgd: {err}", file=sys.stderr)
        return 1
    if switched:
        logging.getLogger("router.identity").info(switched)
    from router.supervisor import Supervisor
    return Supervisor(args.configfile, utc=args.use_utc, config=config, cpu_latency=cpu_latency).run()


def _daemonize(pidfile: str | None) -> None:
    """Classic double fork: the daemon has no terminal. The parent returns to the shell only once
    the daemon has written its pidfile (an init script reads it next), and exits non-zero with the
    daemon's reason when it could not: the daemon's own standard error is /dev/null by then."""
    reader, writer = os.pipe()
    if os.fork():
        os.close(writer)
        _exit_as_the_daemon_reports(reader)
    os.close(reader)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):            # console logging is lost when detached: use <log type="file">
        os.dup2(devnull, fd)
    failure = ""
    if pidfile:
        try:
            _write_pidfile(pidfile)
        except OSError as err:
            failure = _pidfile_error(pidfile, err)
            logging.getLogger("router.daemon").critical(failure)
    try:
        os.write(writer, failure.encode() or _DETACHED)
    except OSError:                 # the parent is gone (killed): nobody waits for the answer
        pass
    os.close(writer)
    if failure:
        os._exit(EXIT_CONFIG_ERROR)


def _exit_as_the_daemon_reports(reader: int) -> None:
    report = b""
    while chunk := os.read(reader, 4096):
        report += chunk
    if report == _DETACHED:
        os._exit(0)
    reason = report.decode(errors="replace") or "the daemon exited while detaching"
    print(f"tnwgd: {reason}", file=sys.stderr, flush=True)
    os._exit(EXIT_CONFIG_ERROR)


def _pidfile_error(path: str, err: OSError) -> str:
    return f"cannot write the pidfile {path} (<daemon><pidfile>): {err.strerror}"


class PidfileTaken(OSError):
    """The pidfile is locked by a running daemon: it names that one, not this one."""


# The open pidfile, locked for as long as this daemon runs (None: there is none).
_pidfile_fd: int | None = None


def _write_pidfile(path: str) -> None:
    """Write this process's pid, holding a lock on the file while the daemon runs. A daemon
    started a second time with the same <pidfile> finds it locked and stops: overwriting it
    made an init script's stop end the second one only, and the second one's exit removed the
    file of the one still running. A file left by a daemon that was killed is not locked, and is
    taken over. The lock is a POSIX record lock: the workers forked later do not hold it."""
    global _pidfile_fd
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise PidfileTaken(0, f"another tnwgd (pid {holder}) is running with it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        os.close(fd)
        raise
    _pidfile_fd = fd


def _remove_pidfile(path: str) -> None:
    """Remove the pidfile this daemon wrote, and only that file: not one it never wrote (it
    could not), nor one put in its place since."""
    global _pidfile_fd
    fd, _pidfile_fd = _pidfile_fd, None
    if fd is None:
        return
    try:
        mine = os.fstat(fd)
        found = os.stat(path)
        if (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino):
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        # Written as root, in a directory only root may change (/run), by a daemon that runs as
        # <uid> since: it cannot remove the file. Emptied, it names no process, where it would
        # name one that reuses this pid. Truncating the file this daemon opened is safe even if
        # the path names another file by now.
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        logging.getLogger("router.daemon").warning(
            "cannot remove the pidfile %s (%s): emptied it instead; put <pidfile> in a directory "
            "the router's user may write (the runtime directory, say)", path, err.strerror)
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
