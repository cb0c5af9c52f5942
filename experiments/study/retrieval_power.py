"""Sizing of the passkey/needle runs (issue 14 item 2): exact McNemar power against base, per length.

Prints (1) the queries needed to detect an Acc@1 difference of 0.15 with 80% power at alpha 0.05 per test
for several discordance rates, and (2) the smallest difference the affordable sizes detect.
Run: python experiments/study/retrieval_power.py
"""

from __future__ import annotations

from llm_collapse.metrics.power import detectable_difference, holm_level, mcnemar_power, queries_needed

DISCORDANCE = (0.15, 0.2, 0.25, 0.3, 0.4)

print("queries needed to detect |dAcc@1| = 0.15 (80% power, exact McNemar, two-sided alpha 0.05 per test)")
for psi in DISCORDANCE:
    print(f"  discordant share {psi:.2f}: n >= {queries_needed(0.15, psi)}")
print()
print("power at |dAcc@1| = 0.15 by queries per length (alpha 0.05 per test)")
for n in (24, 48, 96, 120):
    row = "  ".join(f"psi {psi:.2f}: {mcnemar_power(n, 0.15, psi):.2f}" for psi in DISCORDANCE)
    print(f"  n = {n:3d}: {row}")
print()
print("smallest |dAcc@1| detected with 80% power (alpha 0.05 per test)")
for n in (20, 24, 96):
    best = detectable_difference(n)
    row = "  ".join(f"psi {psi:.2f}: {detectable_difference(n, psi):.3f}" for psi in (0.2, 0.3, 0.4))
    print(f"  n = {n:3d}: all discordant one way {best:.3f}  {row}")
print()
# retrieval4k.yaml and retrieval8k_tau/_ntk/_yarn.yaml: 3 methods against base at 2 lengths, a Holm family of 6
# (issue 44 item 3)
family = 6
level = holm_level(0.05, family)
print(
    f"Holm level of the first of {family} tests: {level:.5f}; queries needed for |dAcc@1| = 0.15 (80% power)"
)
print(
    "  " + "  ".join(f"psi {psi:.2f}: n >= {queries_needed(0.15, psi, alpha=level)}" for psi in DISCORDANCE)
)
for n in (96, 144, 168):
    row = "  ".join(f"psi {psi:.2f}: {mcnemar_power(n, 0.15, psi, level):.2f}" for psi in DISCORDANCE)
    print(f"  n = {n:3d}: {row}")
