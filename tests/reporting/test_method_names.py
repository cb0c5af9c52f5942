"""One name per method for the reader (issue 64): as ``--methods`` wrote it, in every table, legend and title
of a report; rows and file names keep the slug."""

from __future__ import annotations

import pandas as pd
import pytest

from llm_collapse.reporting.names import method_cell, method_names, showing, shown
from llm_collapse.reporting.synthetic_runs import write_synthetic_run


def test_names_map_each_slug_to_the_method_as_written():
    names = method_names(["base", "tempscale:0.8", "ntk:1e5+window:off", "tempscale:.8", "no-such:method"])
    assert names == {
        "base": "base",
        "tempscale-0.8": "tempscale:0.8",
        "ntk-theta1e5+window-off": "ntk:1e5+window:off",
    }
    assert shown("tempscale-0.8") == "tempscale-0.8"  # no report open: the slug
    with showing(names):
        assert shown("tempscale-0.8") == "tempscale:0.8" and method_cell("tempscale-0.8") == "`tempscale:0.8`"
        assert shown("pi-4") == "pi-4"  # no run named it
    assert shown("tempscale-0.8") == "tempscale-0.8"


def test_a_report_shows_the_methods_as_written_and_its_rows_keep_the_slugs(tmp_path):
    pytest.importorskip("seaborn")
    import matplotlib.pyplot as plt

    from llm_collapse.reporting.build import build_report

    drawn = []
    real = plt.Figure.savefig

    def legends(fig, *args, **kwargs):  # every legend and title of every figure the report draws
        for ax in fig.axes:
            drawn.append(ax.get_title())
            if ax.get_legend() is not None:
                drawn.extend(t.get_text() for t in ax.get_legend().get_texts())
        drawn.extend(t.get_text() for legend in fig.legends for t in legend.get_texts())
        return real(fig, *args, **kwargs)

    run = write_synthetic_run(
        tmp_path / "r", methods=("base", "tempscale:0.8", "ntk:1e5+window:off"), tasks=("collapse", "passkey")
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plt.Figure, "savefig", legends)
        files = build_report([run], run)
    md = files["report.md"].read_text(encoding="utf-8")
    assert "`tempscale:0.8`" in md and "`ntk:1e5+window:off`" in md
    assert "tempscale-0.8" not in md and "ntk-theta1e5" not in md
    assert "tempscale:0.8" in drawn and not [text for text in drawn if "tempscale-0.8" in text]
    assert set(pd.read_parquet(run / "results.parquet")["method"]) >= {"tempscale-0.8"}  # rows keep the slug
