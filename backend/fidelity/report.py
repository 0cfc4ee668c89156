"""The card's two tables (perplexity per corpus; divergence per span) as text, from compare's report dict."""

SPAN_TITLES = {
    "tool_call": "tool call",
    "think": "think",
    "response": "response",
    "other": "other",
    "all": "all tokens",
}


def _cell(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _table(title: str, head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        padded = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded)

    return "\n".join([title, line(head), line(["-" * w for w in widths]), *map(line, rows)])


COLUMNS = {  # a report key -> (its heading, its format)
    "ppl_ref": ("ppl ref", ".3f"),
    "ppl_cand": ("ppl cand", ".3f"),
    "ppl_ratio": ("ratio", ".2f"),
    "kld_mean": ("mean KLD", ".4g"),
    "kld_median": ("median KLD", ".4g"),
    "top1_agreement": ("top-1", ".1%"),
    "kld_under_0.01": ("KLD<0.01", ".1%"),
}
CORPUS_COLUMNS = ("ppl_ref", "ppl_cand", "ppl_ratio", "kld_mean", "top1_agreement")
SPAN_COLUMNS = ("ppl_ref", "ppl_cand", "kld_mean", "kld_median", "top1_agreement", "kld_under_0.01")


def _stats_table(title: str, first: str, rows: dict, columns: tuple[str, ...], names=None) -> str:
    """One row per entry of ``rows``: its name, its token count, then ``columns`` (keys of COLUMNS)."""
    body = [
        [(names or {}).get(name, name), str(s["tokens"]), *(_cell(s.get(key), COLUMNS[key][1]) for key in columns)]
        for name, s in rows.items()
    ]
    return _table(title, [first, "tokens", *(COLUMNS[key][0] for key in columns)], body)


def corpus_table(corpora: dict) -> str:
    return _stats_table("Perplexity per corpus", "corpus", corpora, CORPUS_COLUMNS)


def span_table(spans: dict) -> str:
    return _stats_table("Divergence per span (trace windows)", "span", spans, SPAN_COLUMNS, SPAN_TITLES)


def render(report: dict) -> str:
    """Both tables, the error bound of the stored distribution, and --generate's figures if any."""
    base, cand = report["base"], report["candidate"]
    everything = report["corpora"].get("all", {})
    parts = [
        f"reference {base['reference']['path']}  vs  candidate {cand['path']} ({cand['ranks']} rank(s))",
        f"BASE {base['path']}: {base['windows']} windows of up to {base['window']} tokens, top-{base['top_k']}",
        "",
        corpus_table(report["corpora"]),
        "",
        span_table(report["spans"]),
        "",
        f"KLD is over the reference's top-{base['top_k']} plus the rest as one outcome: a lower bound of the full "
        f"KLD. The rest held {_cell(everything.get('rest_mass_mean'), '.2e')} of the reference's probability on "
        f"average; the full KLD exceeds the mean shown by at most {_cell(everything.get('tail_bound_mean'), '.2e')}.",
    ]
    gen = report.get("generate")
    if gen:
        finish = ", ".join(f"{k} {v}" for k, v in gen["finish"].items() if v)
        parts += [
            "",
            f"Generation: {gen['sessions']} sessions at temperature {gen['temp']}, top-p {gen['top_p']}, "
            f"at most {gen['max_tokens']} tokens: loop rate {gen['loop_rate']:.1%}, ended on a stop token "
            f"{gen['stop_share']:.1%} ({finish}); {gen['tool_calls']} tool calls, "
            f"{gen['tool_call_errors']} malformed.",
        ]
    return "\n".join(parts)
