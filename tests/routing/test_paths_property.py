"""Properties over random topologies: the chosen path is a real path, no alternative is cheaper,
and every router computes the same path whatever order it heard the map in."""
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.routing.net import Net, hop_names


@st.composite
def networks(draw):
    router_count = draw(st.integers(2, 6))
    domain_count = draw(st.integers(2, 5))
    node_ids = draw(st.lists(st.integers(1, 2**63 - 1), min_size=router_count, max_size=router_count, unique=True))
    net = Net()
    names = [f"R{i}" for i in range(router_count)]
    for name, node_id in zip(names, node_ids):
        net.router(name, node_id)
        domains = draw(st.lists(st.integers(1, domain_count), min_size=0, max_size=3, unique=True))
        for domain in domains:
            net.endpoint(name, domain, cost=draw(st.integers(1, 4)))
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    for a, b in draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []:
        net.peer(a, b, draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    return net


def _edges(net: Net) -> dict:
    """node -> {next node: cost}: the graph the paths module is documented to search."""
    edges: dict = {}
    for name, adjacencies in net.adjacencies.items():
        for a in adjacencies:
            if a.kind == "domain":
                edges.setdefault(name, {})[f"D{a.neighbor}"] = a.cost
                edges.setdefault(f"D{a.neighbor}", {})[name] = 0
            else:
                other = next(n for n, i in net.ids.items() if i == a.neighbor)
                edges.setdefault(name, {})[other] = a.cost
    return edges


def _cheapest_by_brute_force(edges: dict, source: str, destination: str) -> int | None:
    best = None
    stack = [(source, 0, {source})]
    while stack:
        node, cost, seen = stack.pop()
        if node == destination:
            best = cost if best is None else min(best, cost)
            continue
        for neighbor, edge_cost in edges.get(node, {}).items():
            if neighbor not in seen:
                stack.append((neighbor, cost + edge_cost, seen | {neighbor}))
    return best


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(networks(), st.integers(0, 1000))
def test_chosen_path_is_cheapest_real_and_identical_for_shuffled_inputs(net, seed):
    edges = _edges(net)
    names = list(net.ids)
    reference = net.routes(names[0])
    other_view = net.routes(names[-1], shuffle_seed=seed)
    assert net.topology(names[0]).signature() == net.topology(names[-1], shuffle_seed=seed).signature()
    for source in reference.domains:
        for destination in reference.domains:
            if source == destination:
                continue
            path = reference.path(source, destination)
            best = _cheapest_by_brute_force(edges, f"D{source}", f"D{destination}")
            if best is None:
                assert path is None
                continue
            assert path is not None and path.cost == best
            hops = hop_names(path)
            assert sum(edges[a][b] for a, b in zip(hops, hops[1:])) == path.cost
            assert len(set(hops)) == len(hops)
            shuffled = other_view.path(source, destination)
            assert hop_names(shuffled) == hops and shuffled.cost == path.cost
