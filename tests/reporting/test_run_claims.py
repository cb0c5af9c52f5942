"""Claims a run declares in its config: checked before any work, recorded in run.json, part of the run id, and
read first in the run's report with answers.csv beside it."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from llm_collapse.reporting.synthetic_runs import write_synthetic_run
from llm_collapse.run.config import CompareConfig, ConfigError

CLAIM = {
    "claim": "tau 0.9 shrinks the fall of the paper's distance",
    "metric": "collapse/global_centroid_distance_vs_base_vs_shortest",
    "method": "tempscale:0.9",
    "length": 128,
    "asks": "less collapse",
    "margin": 0.01,
    "margin_reason": "a tenth of base's fall in the pilot",
}


def _config(**overrides) -> CompareConfig:
    values = dict(models=["minilm"], methods=["base", "tempscale:0.9"], tasks=["collapse"], lengths=[64, 128])
    return CompareConfig.from_values({**values, **overrides}).validate()


def test_claims_are_normalised_for_run_json_and_enter_the_run_id():
    config = _config(claims=[CLAIM])
    (claim,) = config.claims
    assert claim["method"] == "tempscale-0.9" and claim["model"] == "minilm" and claim["family"] == "claims"
    assert claim["metric"] == CLAIM["metric"] and claim["depth"] is None and claim["margin"] == 0.01
    assert config.run_id() != _config().run_id()  # a claim added later makes another run
    assert _config(claims=[]).run_id() == _config().run_id()  # runs without claims keep their id
    assert _config(claims=config.claims).claims == config.claims  # validating twice changes nothing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"method": "tempscale:0.7"}, "is not in --methods"),
        ({"length": 256}, "is not in --lengths"),
        ({"metric": "passkey/acc@1_vs_base"}, "is not in --tasks"),
        ({"metric": "collapse/pairwise_cosine"}, "must be 'task/<paired metric>'"),
        ({"asks": "smaller"}, "is not one of"),
        ({"model": "gemma3-270m"}, "is not in --models"),
        ({"margin_reason": None}, "needs its margin_reason"),
        ({"margin": -0.1}, "must be a positive number"),
        ({"side": "left"}, "exactly the keys"),
    ],
)
def test_a_bad_claim_is_one_config_line(change, message):
    claim = {key: value for key, value in {**CLAIM, **change}.items() if value is not None}
    with pytest.raises(ConfigError, match=message) as err:
        _config(claims=[claim])
    assert "\n" not in str(err.value) and str(err.value).startswith("claims item 1")


def test_the_same_row_claimed_twice_is_refused():
    with pytest.raises(ConfigError, match="same row as an earlier claim"):
        _config(claims=[CLAIM, {**CLAIM, "claim": "again"}])


def _run_with_claims(tmp_path, claims: list[dict]):
    """A synthetic run with one paired interaction row (a clear rise of the paper's distance: less collapse)."""
    run = write_synthetic_run(tmp_path / "run", models=("m",), tasks=("collapse",))
    results = pd.read_parquet(run / "results.parquet")
    d = 0.02 + 0.01 * np.linspace(-1, 1, 40)
    from llm_collapse.metrics.contrasts import mean_difference

    c = mean_difference(d)
    row = dict(model="m", method="tempscale-0.9", task="collapse", corpus="synthetic", length=2048, depth=math.nan,
               layer=math.nan, metric="global_centroid_distance_vs_base_vs_shortest", value=c.estimate,
               ci_low=c.low, ci_high=c.high, n=c.n, p_value=c.p)  # fmt: skip
    pd.concat([results, pd.DataFrame([row])], ignore_index=True).to_parquet(run / "results.parquet")
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["claims"] = claims
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_a_run_report_opens_with_its_declared_claims_and_writes_answers_csv(tmp_path):
    pytest.importorskip("seaborn")
    from llm_collapse.reporting.build import build_report

    claim = {**CLAIM, "model": "m", "method": "tempscale-0.9", "length": 2048, "depth": None, "layer": None,
             "family": "claims"}  # fmt: skip
    run = _run_with_claims(tmp_path, [claim])
    files = build_report([run], run)
    text = (run / "report.md").read_text()
    assert text.index("## Claims") < text.index("## Summary")
    answers = pd.read_csv(files["answers.csv"])
    assert list(answers.verdict) == ["yes"] and bool(answers.declared.iloc[0])
    assert "| claims | tau 0.9 shrinks the fall of the paper's distance | yes |" in text
    # the same run without claims: no section, and no answers.csv of the earlier build left behind
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["claims"] = []
    (run / "run.json").write_text(json.dumps(meta))
    build_report([run], run)
    assert "## Claims" not in (run / "report.md").read_text() and not (run / "answers.csv").exists()
