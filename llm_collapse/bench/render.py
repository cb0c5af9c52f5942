"""``bench.md`` from the JSON result."""

from __future__ import annotations

import json

from llm_collapse.bench.config import SIDE_LABELS, SIDES
from llm_collapse.utils.markdown import markdown_table


def _contention_warning(result: dict) -> list[str]:
    busy = result.get("contention", {})
    if not busy.get("busy"):
        return []
    return [
        f"> **Busy machine:** other processes used up to {busy['max_other_cores']:.2f} cores (mean "
        f"{busy['mean_other_cores']:.2f}) of {result['environment']['hardware']['cpu_count']} while sections "
        "were timed. Absolute times, FLOP/s and the peak are depressed and noisy; ratios between sides timed in "
        "the same interleaved rounds are the most trustworthy numbers here.",
        "",
    ]


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fmt_status(met: bool | None) -> str:
    """A target's status: ``**met**``, ``**not met**`` or ``not measured``."""
    return "not measured" if met is None else ("**met**" if met else "**not met**")


def _table(header: list[str], rows) -> str:
    """``bench.md``'s tables: cells as given, compact ``|---|`` rule (see `markdown_table`)."""
    return markdown_table(header, rows, escape=False, compact_rule=True)


def _agreement_cell(c: dict | None) -> str:
    return "n/a" if c is None else f"min {c['min']:.5f}, mean {c['mean']:.5f}"


def _throughput_row(row: dict, side: str) -> list:
    s = row["sides"][side]
    return [
        row["model"],
        row["dtype"],
        row["n_texts"],
        f"{row['n_tokens']:,} ({row['min_tokens']}-{row['max_tokens']})",
        row["n_truncated"],
        f"{row['max_length']} / {row['st_settings']['max_seq_length']}",
        SIDE_LABELS[side],
        f"{s['seconds']:.2f}",
        f"{s['tokens_per_s']:,.0f}",
        f"{s['flops_per_s'] / 1e9:.0f}",
        f"{s['fraction_of_peak']:.0%}",
        _cores(s.get("other_cores")),
    ]


def _long_document_row(r: dict) -> list:
    if r["status"] == "ok" or "seconds" in r:
        return [
            r["model"],
            r["backend"],
            r["length"],
            f"{r['seconds']:.2f}",
            f"{r['n_tokens'] / r['seconds']:,.0f}",
            f"{r['flops_per_s'] / 1e9:.0f}" if "flops_per_s" in r else "-",
            f"{r['fraction_of_peak']:.0%}" if "fraction_of_peak" in r else "-",
            f"{r['peak_rss_bytes'] / 2**30:.2f}",
            f"{r['growth_bytes'] / 2**30:.2f}",
            _cores(r.get("other_cores")),
            r["status"],
        ]
    return [r["model"], r["backend"], r["length"], *["-"] * 7, r["status"]]


def _replica_row(r: dict) -> list:
    if "seconds" not in r:
        return [r["model"], r["attention"], r["length"], *["-"] * 5, r["status"]]
    return [
        r["model"],
        r["attention"],
        r["length"],
        f"{r['seconds']:.2f}",
        f"{r['n_tokens'] / r['seconds']:,.0f}",
        f"{r['peak_rss_bytes'] / 2**30:.2f}",
        f"{r['growth_bytes'] / 2**30:.3f}",
        _cores(r.get("other_cores")),
        r["status"],
    ]


def _header(result: dict) -> list[str]:
    """The command, wall time, settings and any contention warning."""
    return [
        "# llm_collapse benchmark",
        "",
        "## Command",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"Wall time {result['wall_seconds']:.0f} s. Settings: `{json.dumps(result['settings'], sort_keys=True)}`",
        "",
        *_contention_warning(result),
        "",
    ]


def _environment_section(result: dict) -> list[str]:
    """Commit, hardware and versions."""
    env = result["environment"]
    return [
        "## Environment",
        "",
        f"- git commit: `{env.get('git_commit')}`",
        f"- hardware: `{json.dumps(env.get('hardware'), sort_keys=True)}`",
        f"- versions: `{json.dumps(env.get('versions'), sort_keys=True)}`",
        f"- sentence-transformers: `{result['versions'].get('sentence-transformers')}`",
        "",
    ]


def _targets_section(result: dict) -> list[str]:
    """Each target, its threshold, the measurement and whether it is met."""
    return [
        "## Targets",
        "",
        _table(
            ["target", "threshold", "measured", "status"],
            [[t["name"], t["threshold"], t["measured"], fmt_status(t["met"])] for t in result["targets"]],
        ),
        "",
    ]


def _peak_section(result: dict) -> list[str]:
    """The matmul peak in the run's dtype, at the start and the end."""
    peaks = result["peak"]
    dtype = result["settings"]["dtype_resolved"]
    return [
        "## Matmul peak",
        "",
        f"Measured in the run's dtype ({dtype}) only, at the start and at the end of the run; the *of {dtype} "
        "peak* columns divide by the better of the two.",
        "",
        _table(
            [
                "dtype",
                "n",
                "reps",
                "best s",
                "median s",
                "peak GFLOP/s (best)",
                "GFLOP/s (median)",
                "GFLOP/s best at start, end",
                "other processes (cores)",
            ],
            [
                [
                    p["dtype"],
                    p["n"],
                    p["reps"],
                    f"{p['best_s']:.4f}",
                    f"{p['median_s']:.4f}",
                    f"{p['flops_per_s'] / 1e9:.0f}",
                    f"{p['median_flops_per_s'] / 1e9:.0f}",
                    ", ".join(f"{v / 1e9:.0f}" for v in p["runs_flops_per_s"]),
                    _cores(p.get("other_cores")),
                ]
                for p in peaks.values()
            ],
        ),
        "",
    ]


def _throughput_section(result: dict) -> list[str]:
    """The three sides on the length-mixed corpus, their ratios and settings."""
    dtype = result["settings"]["dtype_resolved"]
    return [
        "## Throughput on the length-mixed corpus",
        "",
        "Same texts, same weights, dtype, attention implementation and token cap on every side; each side warmed "
        "up once before timing. FLOPs counted as in `llm_collapse.bench` (useful FLOPs: "
        "`2 * linear_params * L + 4 * d_attn * pairs`, causal and sliding-window aware).",
        "",
        _table(
            [
                "model",
                "dtype",
                "texts",
                "tokens (min-max per text)",
                "truncated",
                "max_length (ours / ST)",
                "side",
                "seconds (best round)",
                "tokens/s",
                "GFLOP/s",
                f"of {dtype} peak",
                "other processes (cores)",
            ],
            [_throughput_row(row, side) for row in result["throughput"] for side in SIDES],
        ),
        "",
        _table(
            ["model", "ours / sentence-transformers", "ours / naive", "tokens equal (ST, naive)"],
            [
                [
                    r["model"],
                    f"{r['speedup_vs_st']:.2f}x",
                    f"{r['speedup_vs_naive']:.2f}x",
                    f"{r['tokens_equal']['sentence_transformers']}, {r['tokens_equal']['naive']}",
                ]
                for r in result["throughput"]
            ],
        ),
        "",
        "Settings per side: "
        + "; ".join(
            f"{r['model']}: ours {json.dumps(r['ours_settings'])}, ST {json.dumps(r['st_settings'])}"
            for r in result["throughput"]
        ),
        "",
    ]


def _agreement_section(result: dict) -> list[str]:
    """Cosine agreement between the sides."""
    return [
        "## Agreement (cosine on the benchmark texts)",
        "",
        _table(
            ["model", "ours vs naive", "ST vs naive", "ours vs ST", "note"],
            [
                [
                    r["model"],
                    *(
                        _agreement_cell(r["agreement"][k])
                        for k in ("ours_vs_naive", "st_vs_naive", "ours_vs_st")
                    ),
                    r["agreement"]["note"],
                ]
                for r in result["throughput"]
            ],
        ),
        "",
    ]


def _flops_section(result: dict) -> list[str]:
    """Model FLOP/s at fixed lengths."""
    dtype = result["settings"]["dtype_resolved"]
    return [
        "## Model FLOP/s at fixed lengths (Embedder.encode, batched)",
        "",
        _table(
            [
                "model",
                "tokens per text",
                "batch",
                "seconds (best of 2)",
                "tokens/s",
                "GFLOP/s",
                f"of {dtype} peak",
                "GFLOP/s (dense convention)",
                "other processes (cores)",
            ],
            [
                [
                    r["model"],
                    r["length"],
                    r["batch"],
                    f"{r['seconds']:.2f}",
                    f"{r['tokens_per_s']:,.0f}",
                    f"{r['flops_per_s'] / 1e9:.0f}",
                    f"{r['fraction_of_peak']:.0%}",
                    f"{r['flops_dense_per_s'] / 1e9:.0f}",
                    _cores(r.get("other_cores")),
                ]
                for r in result["flops"]
            ],
        ),
        "",
    ]


def _long_documents_section(result: dict) -> list[str]:
    """One long document per length, in a fresh process."""
    dtype = result["settings"]["dtype_resolved"]
    return [
        "## Long documents (one document, batch 1, fresh process per length)",
        "",
        _table(
            [
                "model",
                "backend",
                "tokens",
                "seconds",
                "tokens/s",
                "GFLOP/s",
                f"of {dtype} peak",
                "peak RSS GiB",
                "growth over loaded model GiB",
                "other processes (cores)",
                "status",
            ],
            [_long_document_row(r) for r in result["long_documents"]],
        ),
    ]


def _replica_section(result: dict) -> list[str]:
    """Memory growth with length on the tiny replicas (none when the section was skipped)."""
    if not result.get("replica_documents"):
        return []
    return [
        "",
        "## Long documents on tiny replicas (memory growth with length)",
        "",
        "Random-weight replicas in the published layouts (`llm_collapse.bench.replicas`): widths are tiny, "
        "masks and attention shapes are the real ones, so RSS growth shows whether memory is linear in length.",
        "",
        _table(
            [
                "model",
                "attention",
                "tokens",
                "seconds",
                "tokens/s",
                "peak RSS GiB",
                "growth over loaded model GiB",
                "other processes (cores)",
                "status",
            ],
            [_replica_row(r) for r in result["replica_documents"]],
        ),
    ]


def _notes(result: dict) -> list[str]:
    """How to read the contention column, the memory and the peak."""
    return [
        "",
        "## Notes",
        "",
        "- Other processes may share the machine. *other processes (cores)* is the CPU time the rest of the machine "
        "used per wall second while a side was timed (`/proc/stat` busy time minus this process's); on 2 cores "
        "anything above ~0.2 means the side competed for the cores, and small forwards then slow down by far more "
        "than the lost share (OpenMP threads wait for each other). Rounds are interleaved and the best is kept; "
        "compare ratios within this run, not absolute numbers across runs.",
        "- Memory is process RSS polled every 5 ms during the timed forward (and `ru_maxrss` when the forward "
        "raised it); growth is measured over the RSS after loading and a short warm-up forward.",
        "- Peak = best of the timed matmul repetitions; a model fraction above 100% would mean the counted "
        "FLOPs overestimate the work or the peak was measured under load.",
        "",
    ]


def render_markdown(result: dict) -> str:
    """``bench.md``: command, environment, targets, throughput, agreement, FLOP/s, long documents."""
    sections = (
        _header,
        _environment_section,
        _targets_section,
        _peak_section,
        _throughput_section,
        _agreement_section,
        _flops_section,
        _long_documents_section,
        _replica_section,
        _notes,
    )
    return "\n".join(line for section in sections for line in section(result))
