"""Which counters are levels (gauges) and which only grow: what the router does with each must
agree with how it is exported (Prometheus gauge or counter) and how the Spark job takes deltas."""
import re
from pathlib import Path

from router.monitor.stats_schema import GAUGES

ROOT = Path(__file__).resolve().parents[2]
_ADDED = re.compile(r'\.add(?:_pair)?\(\s*"([a-z_]+)"(?:,\s*"([a-z_]+)")?')


def test_no_gauge_is_ever_added_to():
    """A figure the router only adds to (streams_in: every stream ever brought in) exported as a
    gauge rises for ever with nothing open; a level is set, never added to."""
    added = {(str(path.relative_to(ROOT)), name)
             for path in (ROOT / "router").rglob("*.py")
             for match in _ADDED.finditer(path.read_text())
             for name in match.groups() if name in GAUGES}
    assert added == set()
