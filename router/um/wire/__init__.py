"""Wire codecs: pure functions from bytes to records and back.

- :mod:`router.um.wire.lbmr` — LBMR topic resolution (UDP), incl. the DRO's extended types.
- :mod:`router.um.wire.lbmc` — LBMC messages and LBT-TCP framing, incl. DRO peer-link headers.
- :mod:`router.um.wire.otid` — originating transport ids.
- :mod:`router.um.wire.errors` — :class:`WireError`, the only exception a decoder raises.

The byte-level contract is spec/wire.md; tshark 4.0.17 is the oracle the tests check against.
"""
