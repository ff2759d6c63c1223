#!/usr/bin/env bash
# One command for a fresh GPU machine (only the repository and the package registry there):
# install, run every GPU test, then the GPU benchmarks; writes one markdown file.
#
#   bash benchmarks/gpu_check.sh            # -> $OUT/gpu_check.md if $OUT is set, else ./gpu_check.md
#
# Budget: at most 8 minutes on an H100 (TOTAL_BUDGET = 470 s from the start): install (seconds
# with a preinstalled stack, ~2 min with pip), tests (TESTS_TIMEOUT, default 240 s), the
# primitives (BENCH_TIMEOUT, 240 s), GPU TPA-SCD vs the CPU solvers (CD_TIMEOUT, 150 s: five
# runs of at most CD_BUDGET = 15 s, data generation and compilation); each stage's timeout is
# cut to what the total leaves once the later stages' are kept, and a failing stage is
# recorded in the file, not fatal.
set -uo pipefail
cd "$(dirname "$0")/.."
REPORT=${OUT:+$OUT/gpu_check.md}
REPORT=${REPORT:-$PWD/gpu_check.md}
mkdir -p "$(dirname "$REPORT")"
LOG=$(dirname "$REPORT")/gpu_check.log
: > "$LOG"
PY=${PYTHON:-python3}
note() { echo "$*" | tee -a "$REPORT"; }
START=$(date +%s)
TOTAL=${TOTAL_BUDGET:-470}  # seconds for the whole script (8 minutes, less a margin)
# a stage's timeout: what it asks for ($1), at most what the budget leaves once $2 seconds are
# kept for the stages after it (at least 20)
stage_timeout() { local left=$(( START + TOTAL - $(date +%s) - $2 )); [ "$left" -lt 20 ] && left=20; echo $(( $1 < left ? $1 : left )); }

{ echo "# Roofline GPU check ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"; echo; } > "$REPORT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/    /' >> "$REPORT"
echo >> "$REPORT"

# 1. install: the preinstalled GPU stack when it has what Roofline needs (GPU images often have
#    no network), the package registry otherwise
t0=$(date +%s)
if "$PY" -c 'import cupy, numba, numba.cuda, scipy, sklearn, h5py, tqdm, pytest, hypothesis' >> "$LOG" 2>&1; then
  # the repository's folders as the roofline namespace, without installing
  mkdir -p .gpu-site/roofline
  for pair in gmat:gmat kernels:kernels glm:glm datasources:datasources learners:learners comm:comm dask:dask_; do
    ln -sfn "$PWD/${pair#*:}" ".gpu-site/roofline/${pair%%:*}"
  done
  # numpy 2.5 dropped np.row_stack, which numba-cuda 0.30 still names when it loads
  printf '%s\n' 'import numpy' \
    'if not hasattr(numpy, "row_stack"):' '    numpy.row_stack = numpy.vstack' > .gpu-site/sitecustomize.py
  export PYTHONPATH="$PWD/.gpu-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  how="preinstalled packages"
else
  if [ ! -x .venv-gpu/bin/python ]; then "$PY" -m venv .venv-gpu >> "$LOG" 2>&1 || true; fi
  [ -x .venv-gpu/bin/python ] && PY=.venv-gpu/bin/python
  if ! timeout 300 "$PY" -m pip install -q --upgrade pip >> "$LOG" 2>&1 \
     || ! timeout 300 "$PY" -m pip install -q -e '.[gpu,dev]' >> "$LOG" 2>&1; then
    note "**install failed** (see gpu_check.log):"; tail -20 "$LOG" | sed 's/^/    /' >> "$REPORT"
    exit 1
  fi
  how="pip install -e .[gpu,dev]"
fi
note "install ($how): $(( $(date +%s) - t0 )) s ($("$PY" -c 'import cupy, numba, numba_cuda; print("cupy", cupy.__version__, "numba", numba.__version__, "numba-cuda", numba_cuda.__version__)' 2>&1 | tail -1))"
"$PY" -c 'from roofline import gmat; assert gmat.gpu_available(), "no usable GPU"' >> "$LOG" 2>&1 \
  || { note "**no usable GPU from cupy** (see gpu_check.log)"; tail -5 "$LOG" | sed 's/^/    /' >> "$REPORT"; exit 1; }

# 2. every GPU test
export ROOFLINE_CACHE_DIR=${ROOFLINE_CACHE_DIR:-$PWD/.roofline-cache}
t0=$(date +%s)
timeout "$(stage_timeout "${TESTS_TIMEOUT:-240}" 300)" "$PY" -m pytest -q -m gpu -p no:cacheprovider ${GPU_TESTS:-tests} > gpu_tests.txt 2>&1
rc=$?
cat gpu_tests.txt >> "$LOG"
note ""; note "## GPU tests (pytest -m gpu): exit $rc, $(( $(date +%s) - t0 )) s"; note ""
{ echo '```'; grep -E "passed|failed|error|FAILED|ERROR" gpu_tests.txt | tail -25; echo '```'; } >> "$REPORT"
rm -f gpu_tests.txt

# 3. the benchmarks: primitives vs cupyx/cuSPARSE on Zipf 2^20 x 1M, k in {1, 16, 128}
note ""; note "## Benchmarks"; note ""
t0=$(date +%s)
timeout "$(stage_timeout "${BENCH_TIMEOUT:-240}" "${CD_TIMEOUT:-150}")" "$PY" benchmarks/primitives.py --device gpu --cd skip \
  --features 1048576 --examples 1000000 --k 1 16 128 --repeat "${BENCH_REPEAT:-5}" \
  --out bench.md >> "$LOG" 2>&1
rc=$?
if [ -s bench.md ]; then cat bench.md >> "$REPORT"; else note "benchmark failed (exit $rc):"; tail -25 "$LOG" | sed 's/^/    /' >> "$REPORT"; fi
rm -f bench.md
note ""; note "primitives: exit $rc, $(( $(date +%s) - t0 )) s"

# 4. GPU TPA-SCD through the front door (fit_glm(device="gpu")) vs Roofline's CPU solvers on
#    1M Criteo-like examples, wall time to the same relative duality gap (each run capped)
note ""; note "## GPU TPA-SCD vs the CPU solvers"; note ""
t0=$(date +%s)
timeout "$(stage_timeout "${CD_TIMEOUT:-150}" 0)" "$PY" benchmarks/primitives.py --device gpu --cd only \
  --cd-examples "${CD_EXAMPLES:-1000000}" --cd-tol "${CD_TOL:-1e-4}" \
  --cd-budget "${CD_BUDGET:-15}" --out cd.md >> "$LOG" 2>&1
rc=$?
if [ -s cd.md ]; then cat cd.md >> "$REPORT"; else note "TPA-SCD comparison failed (exit $rc):"; tail -25 "$LOG" | sed 's/^/    /' >> "$REPORT"; fi
rm -f cd.md
note ""; note "TPA-SCD comparison: exit $rc, $(( $(date +%s) - t0 )) s"
echo "wrote $REPORT"
