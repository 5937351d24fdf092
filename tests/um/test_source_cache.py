"""The resolver cache: OTID grouping, lowest cost, cost function, final advertisements."""
from router.um.source_cache import TopicSources, otid_of
from router.um.wire.lbmr import COST_INFINITE, CostOption, OtidOption, TcpInfo, Tir
from router.um.wire.otid import tcp_otid

OTID = tcp_otid("10.0.0.1", 14371, 1)


def tir(port: int, cost: int | None = None, otid: bytes | None = OTID, hops: int = 1) -> Tir:
    options = []
    if cost is not None:
        options.append(CostOption(hops, cost))
    if otid is not None:
        options.append(OtidOption(otid))
    return Tir("t", TcpInfo("127.0.0.1", port, 7), 1, 0, options)


def test_equivalent_advertisements_pick_the_cheapest():
    sources = TopicSources("t")
    assert sources.observe(tir(1000, cost=5), now=0)[0] == "new"
    assert sources.observe(tir(1001, cost=2), now=0)[0] == "new"
    assert sources.observe(tir(1000, cost=5), now=1)[0] == "refresh"
    assert sources.best(OTID).transport.port == 1001
    assert len(sources.otids()) == 1


def test_final_advertisement_removes_that_path_only():
    sources = TopicSources("t")
    sources.observe(tir(1000, cost=5), now=0)
    sources.observe(tir(1001, cost=2), now=0)
    kind, gone = sources.observe(tir(1001, cost=COST_INFINITE), now=1)
    assert kind == "final" and gone.transport.port == 1001
    assert sources.best(OTID).transport.port == 1000


def test_cost_function_can_rewrite_or_reject():
    def prefer_high_ports(topic, source, hops, cost):
        if "1002" in source:
            return None
        return 100 - int(source.split(":")[2]) % 100
    sources = TopicSources("t", prefer_high_ports)
    sources.observe(tir(1000, cost=1), now=0)
    sources.observe(tir(1001, cost=50), now=0)
    assert sources.observe(tir(1002, cost=0), now=0) == ("rejected", None)
    assert sources.best(OTID).transport.port == 1001


def test_without_otid_option_the_transport_identifies_the_source():
    a, b = tir(1000, otid=None), tir(1001, otid=None)
    assert otid_of(a) != otid_of(b)
    sources = TopicSources("t")
    sources.observe(a, now=0)
    sources.observe(b, now=0)
    assert len(sources.otids()) == 2


def test_forget_after_eos_moves_to_the_next():
    sources = TopicSources("t")
    sources.observe(tir(1000, cost=5), now=0)
    sources.observe(tir(1001, cost=2), now=0)
    best = sources.best(OTID)
    sources.set_joined(OTID, best)
    sources.forget(best)
    assert sources.joined(OTID) is None
    assert sources.best(OTID).transport.port == 1000


def test_the_cache_forgets_what_is_gone_and_what_nobody_repeats():
    sources = TopicSources("t")
    _, joined = sources.observe(tir(1000, cost=5), now=0)
    sources.observe(tir(1001, cost=2), now=0)
    sources.set_joined(OTID, joined)
    assert sources.expire(cutoff=10) == 1, "the path nobody joined goes; the joined one stays however old"
    sources.forget(joined)                                  # its transport ended
    assert sources.empty, "an OTID with no path left and nobody joined is forgotten"
    assert sources.observe(tir(1000, cost=5), now=20)[0] == "new"
    assert sources.observe(tir(1000, cost=5), now=25)[0] == "refresh"
    assert sources.expire(cutoff=22) == 0 and not sources.empty, "heard again at 25"
    assert sources.observe(tir(1000, cost=COST_INFINITE), now=26)[0] == "final" and sources.empty
