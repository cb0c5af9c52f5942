"""Targets (met / not met, never asserted) and how busy the machine was while sections were timed."""

from __future__ import annotations

from dataclasses import dataclass, field

from llm_collapse.bench.config import (
    BUSY_CORES,
    TARGET_32K_SECONDS,
    TARGET_MEMORY_GROWTH,
    TARGET_PEAK_FRACTION,
    TARGET_ST_RATIO,
)
from llm_collapse.bench.replicas import replica_targets


@dataclass
class Target:
    """One target row: ``met`` is None when the bench did not measure it."""

    name: str
    threshold: str
    measured: str
    met: bool | None
    values: dict = field(default_factory=dict)

    def describe(self) -> dict:
        return dict(self.__dict__)


def evaluate_targets(result: dict) -> list[Target]:
    targets = []
    for row in result["throughput"]:
        ratio = row["speedup_vs_st"]
        targets.append(
            Target(
                f"{row['model']}: tokens/s vs sentence-transformers ({row['dtype']})",
                f">= {TARGET_ST_RATIO}x",
                f"{ratio:.2f}x ({row['sides']['ours']['tokens_per_s']:,.0f} vs "
                f"{row['sides']['sentence_transformers']['tokens_per_s']:,.0f} tok/s)",
                ratio >= TARGET_ST_RATIO,
                {"ratio": ratio},
            )
        )
    if not result["throughput"]:
        targets.append(
            Target("tokens/s vs sentence-transformers", f">= {TARGET_ST_RATIO}x", "not measured", None)
        )
    gemma = [r for r in result["flops"] if r["model"] == "gemma3-270m" and 512 <= r["length"] <= 2048]
    if gemma:
        worst = min(r["fraction_of_bf16_peak"] for r in gemma)
        shown = ", ".join(f"{r['length']}: {r['fraction_of_bf16_peak']:.0%}" for r in gemma)
        targets.append(
            Target(
                "gemma3-270m: model FLOP/s vs bf16 matmul peak at 512-2048 tokens",
                f">= {TARGET_PEAK_FRACTION:.0%} at every length",
                f"{shown} of {result['peak']['bf16']['flops_per_s'] / 1e9:.0f} GFLOP/s",
                worst >= TARGET_PEAK_FRACTION,
                {"min_fraction": worst},
            )
        )
    else:
        targets.append(Target("gemma3-270m: model FLOP/s vs bf16 peak", ">= 50%", "not measured", None))
    ok = {
        (r["backend"], r["length"]): r
        for r in result["long_documents"]
        if r["model"] == "gemma3-270m" and r["status"] == "ok"
    }
    for backend in ("hf", "vllm"):
        rows = [
            r for r in result["long_documents"] if r["model"] == "gemma3-270m" and r["backend"] == backend
        ]
        if backend == "vllm" and not rows:
            continue
        status = {r["length"]: r["status"] for r in rows}
        row = ok.get((backend, 32768))
        name = f"gemma3-270m ({backend}): one 32k-token document"
        if row is None:
            targets.append(
                Target(name, f"<= {TARGET_32K_SECONDS:.0f} s", status.get(32768, "not measured"), None)
            )
        else:
            targets.append(
                Target(
                    name,
                    f"<= {TARGET_32K_SECONDS:.0f} s",
                    f"{row['seconds']:.1f} s",
                    row["seconds"] <= TARGET_32K_SECONDS,
                    {"seconds": row["seconds"]},
                )
            )
        low, high = ok.get((backend, 16384)), ok.get((backend, 32768))
        name = f"gemma3-270m ({backend}): RSS growth 16k -> 32k"
        if low is None or high is None:
            why = next((status[n] for n in (16384, 32768) if status.get(n, "ok") != "ok"), "not measured")
            targets.append(Target(name, f"<= {TARGET_MEMORY_GROWTH}x", why, None))
            continue
        growth = high["growth_bytes"] / max(low["growth_bytes"], 1)
        peak = high["peak_rss_bytes"] / max(low["peak_rss_bytes"], 1)
        targets.append(
            Target(
                name,
                f"<= {TARGET_MEMORY_GROWTH}x",
                f"{growth:.2f}x (+{low['growth_bytes'] / 2**30:.2f} -> +{high['growth_bytes'] / 2**30:.2f} GiB "
                f"over the loaded model; total peak {peak:.2f}x)",
                growth <= TARGET_MEMORY_GROWTH,
                {"growth_ratio": growth, "peak_ratio": peak},
            )
        )
    return targets + replica_targets(result.get("replica_documents", []))


def contention(result: dict) -> dict:
    """Largest and mean ``other_cores`` over every timed section (None when /proc/stat was unreadable)."""
    values = [p.get("other_cores") for p in result["peak"].values()]
    values += [s.get("other_cores") for r in result["throughput"] for s in r["sides"].values()]
    rows = result["flops"] + result["long_documents"] + result.get("replica_documents", [])
    values += [r.get("other_cores") for r in rows if "seconds" in r]
    values = [v for v in values if v is not None]
    if not values:
        return {"max_other_cores": None, "mean_other_cores": None, "busy": None}
    return {
        "max_other_cores": max(values),
        "mean_other_cores": sum(values) / len(values),
        "busy": max(values) > BUSY_CORES,
    }
