"""How the editor side words a daemon that is still loading: from a map the daemon sent, so nothing in it is
trusted to be well formed."""

from k3lsp.core.replies import LoadProgress, loading_of


def describe(loading) -> str:
    return LoadProgress.of(loading).describe()


def test_figures_are_read_defensively():
    assert describe({"percent": 42, "eta_seconds": 84.9}) == "backend loading (42 %, about 85 s left)"
    assert describe({"percent": 150}) == "backend loading (100 %)"
    assert describe({"percent": True, "eta_seconds": "soon"}) == "backend loading"
    assert describe(["not", "a", "map"]) == "backend loading" and LoadProgress.of(None).percent is None
    assert describe({"percent": 7, "eta_seconds": -3}) == "backend loading (7 %)"
    assert loading_of({"state": "loading"}) is not None and loading_of({"state": "ready"}) is None
    assert loading_of("loading") is None
