"""How the editor side words a daemon that is still loading: from a map the daemon sent, so nothing in it is
trusted to be well formed."""

from k3lsp import loading


def test_figures_are_read_defensively():
    assert loading.describe({"percent": 42, "eta_seconds": 84.9}) == "backend loading (42 %, about 85 s left)"
    assert loading.describe({"percent": 150}) == "backend loading (100 %)"
    assert loading.describe({"percent": True, "eta_seconds": "soon"}) == "backend loading"
    assert loading.describe(["not", "a", "map"]) == "backend loading" and loading.percent(None) is None
    assert loading.describe({"percent": 7, "eta_seconds": -3}) == "backend loading (7 %)"
    assert loading.is_loading({"state": "loading"}) and not loading.is_loading({"state": "ready"})
    assert not loading.is_loading("loading")
