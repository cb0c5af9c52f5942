#!/usr/bin/env bash
# Every study run, then the study report. Each run is resumable (embedding cache); see experiments/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
for name in tempscale layerwise rope echo pooling_last; do
  python -m llm_collapse.compare --config "experiments/study/${name}.yaml"
done
python experiments/quantization.py
python -m llm_collapse.study reports/study
