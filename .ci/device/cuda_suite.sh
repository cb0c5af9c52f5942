#!/usr/bin/env bash
# Issue 46, the device call: `bash .ci/device/cuda_suite.sh` with carry [".whl"] (after wheels.sh and
# `slim_tree.sh on` here). Installs the carried wheels, then runs the gpu-marked tests and the default suite with
# CUDA visible; JUnit XML, logs and the machine's versions land in $OUT for summarize.py. Check it here with CUDA
# hidden: `CUDA_VISIBLE_DEVICES= OUT=/tmp/out PYTHON=.venv/bin/python KEYWORD=agreement bash .ci/device/cuda_suite.sh`
# (KEYWORD: a pytest -k expression, for such checks only; -n WORKERS where pytest-xdist is installed).
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:?set OUT to a folder for the logs}
GPU_TIMEOUT=${GPU_TIMEOUT:-200}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-330}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed" >&2; exit 3; }
export PYTHONPATH=/tmp/site
# The committed reports do not travel (slim_tree.sh): the tests that read them are device-independent and run in CI.
REPORT_TESTS=(--ignore=tests/reporting/test_committed_reports.py --ignore=tests/test_experiments.py
  --ignore=tests/test_readme_findings.py --ignore=tests/test_docs_links.py --ignore=tests/reporting/test_report_browser.py
  --ignore=tests/reporting/test_study_readings.py --ignore=tests/reporting/test_study_summary.py
  --deselect=tests/run/test_matched_controls.py::test_controls_enter_the_run_id_only_when_set
  --deselect=tests/run/test_run_record.py::test_committed_typed_fields_are_read_as_attributes)
"$PYTHON" - > "$OUT/env.json" <<'PY'
import json, platform, torch, transformers
cuda = torch.cuda.is_available()
print(json.dumps({"gpu": torch.cuda.get_device_name(0) if cuda else None, "cuda": torch.version.cuda,
                  "torch": torch.__version__, "transformers": transformers.__version__,
                  "python": platform.python_version(), "cuda_available": cuda}))
PY
cat "$OUT/env.json"
# -p no:cacheprovider: the tree is read-only in spirit; -rs lists every skip with its reason (the JUnit XML has them too)
timeout "$GPU_TIMEOUT" "$PYTHON" -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml="$OUT/gpu.xml" \
  "${REPORT_TESTS[@]}" ${KEYWORD:+-k "$KEYWORD"} tests > "$OUT/gpu.log" 2>&1
echo "gpu suite rc=$?"; tail -n 25 "$OUT/gpu.log"
PARALLEL=(); "$PYTHON" -c "import xdist" 2>/dev/null && PARALLEL=(-n "${WORKERS:-8}")
timeout "$SUITE_TIMEOUT" "$PYTHON" -m pytest -q -rs "${PARALLEL[@]}" -p no:cacheprovider --junitxml="$OUT/default.xml" \
  "${REPORT_TESTS[@]}" ${KEYWORD:+-k "$KEYWORD"} tests > "$OUT/default.log" 2>&1
echo "default suite rc=$?"; tail -n 40 "$OUT/default.log"
