#!/usr/bin/env bash
# The device step's GPU check, in one run (about 2-4 minutes on an H200):
#
#   1. nvidia-smi, and the Python/torch/Triton versions             -> $OUT/nvidia-smi.txt, env.txt
#   2. every gpu-marked test (the CUDA parity tests of the kernel)   -> $OUT/pytest-gpu.txt, .xml
#   3. benchmarks/bench_mm_input_norm.py, all workloads              -> $OUT/bench_mm_input_norm.{txt,json,csv}
#
# and $OUT/gpu_check.log with every step's output (8 files in all). It fails loudly (non-zero, and
# the reason on stderr) when there is no CUDA device, when a gpu-marked test fails, errors or is
# SKIPPED, or when the benchmark fails; it never reports CPU figures as GPU ones.
#
#   OUT="$(mktemp -d)" bash benchmarks/gpu_check.sh            # on the GPU machine
#   OUT="$(mktemp -d)" bash benchmarks/gpu_check.sh --dry-run  # on a CPU: the same steps, the kernels
#                                                         # interpreted, skips allowed, no nvidia-smi
#
# Python: $PYTHON, else the first of .venv/bin/python and python3 that imports torch. mediaref is
# imported from src/ when it is not installed: these steps need torch, Triton, numpy, pytest and
# what tests/conftest.py imports, not mediaref's media dependencies (PyAV, soundfile, ...). An
# image that has torch but lacks blake3, pybase64, cachetools or pytest-asyncio (the H200 image
# did, 2026-12) takes them as wheels for its Python, downloaded here and installed first:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 -d .whl blake3 pybase64 cachetools pytest-asyncio
#   # there: SITE="$(mktemp -d)"; pip install --no-index --no-deps --target "$SITE" .whl/*.whl
#   PYTHONPATH="$SITE" PYTHON=python3 bash benchmarks/gpu_check.sh
set -uo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=1; fi

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 1
OUT="${OUT:-$REPO/gpu-check-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: >"$LOG"

if [[ -z "${PYTHON:-}" ]]; then
  # The first interpreter that has torch: a venv carried from another machine may not run here.
  for candidate in .venv/bin/python python3; do
    if "$candidate" -c "import torch" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
[[ -n "${PYTHON:-}" ]] || { echo "gpu_check FAILED: no Python with torch (.venv/bin/python, python3)" >&2; exit 1; }
if ! "$PYTHON" -c "import mediaref" 2>/dev/null; then
  export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1

fail() { echo "gpu_check FAILED: $*" | tee -a "$LOG" >&2; exit 1; }
step() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$LOG"; }

# -- 1. the device ------------------------------------------------------------------------------
step "device"
if [[ $DRY_RUN -eq 0 ]]; then
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || fail "nvidia-smi failed (no NVIDIA driver?): $(tail -3 "$OUT/nvidia-smi.txt")"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version \
    --format=csv >>"$OUT/nvidia-smi.txt" 2>&1 || true
fi
"$PYTHON" - >"$OUT/env.txt" 2>&1 <<'EOF'
import platform, sys
import torch
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
try:
    import triton
    print("triton", triton.__version__)
except ImportError as exc:
    print("triton missing:", exc)
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    print("device", props.name, f"{props.total_memory / 2**30:.1f} GiB", props.multi_processor_count, "SMs")
import mediaref
print("mediaref", mediaref.__file__)
EOF
rc=$?
cat "$OUT/env.txt" | tee -a "$LOG"
[[ $rc -eq 0 ]] || fail "the Python environment is broken (see env.txt)"
if [[ $DRY_RUN -eq 0 ]]; then
  "$PYTHON" -c "import torch, triton, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || fail "torch sees no CUDA device, or Triton is missing: this check needs the GPU"
fi

# -- 2. the CUDA parity tests ------------------------------------------------------------------
step "gpu-marked tests"
mapfile -t GPU_TEST_FILES < <(grep -rlE "pytest\.mark\.gpu" tests --include='test_*.py' | sort)
[[ ${#GPU_TEST_FILES[@]} -gt 0 ]] || fail "no gpu-marked test files found under tests/"
echo "files: ${GPU_TEST_FILES[*]}" | tee -a "$LOG"
timeout 300 "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider -rs -o addopts="" \
  --junitxml="$OUT/pytest-gpu.xml" "${GPU_TEST_FILES[@]}" >"$OUT/pytest-gpu.txt" 2>&1
rc=$?
tail -25 "$OUT/pytest-gpu.txt" | tee -a "$LOG"
# Counts from the JUnit report: a skip here means the GPU tests did not run, which is a failure.
read -r TESTS FAILURES ERRORS SKIPPED < <("$PYTHON" - "$OUT/pytest-gpu.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print(0, 0, 1, 0); raise SystemExit
suites = [root] if root.tag == "testsuite" else list(root)
print(*(sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")))
EOF
)
echo "gpu tests: $TESTS collected, $FAILURES failed, $ERRORS errors, $SKIPPED skipped (pytest rc $rc)" | tee -a "$LOG"
[[ "$FAILURES" == 0 && "$ERRORS" == 0 && ( $rc -eq 0 || $rc -eq 5 ) ]] || fail "gpu-marked tests failed (see pytest-gpu.txt)"
[[ "$TESTS" -gt 0 ]] || fail "no gpu-marked test was collected"
if [[ $DRY_RUN -eq 0 && "$SKIPPED" != 0 ]]; then
  fail "$SKIPPED gpu-marked tests were skipped on the GPU machine (see pytest-gpu.txt)"
fi

# -- 3. the bandwidth benchmark ----------------------------------------------------------------
step "bench_mm_input_norm"
BENCH_ARGS=(--json "$OUT/bench_mm_input_norm.json" --csv "$OUT/bench_mm_input_norm.csv")
[[ $DRY_RUN -eq 1 ]] && BENCH_ARGS+=(--dry-run)
timeout 420 "$PYTHON" benchmarks/bench_mm_input_norm.py "${BENCH_ARGS[@]}" >"$OUT/bench_mm_input_norm.txt" 2>&1
rc=$?
cat "$OUT/bench_mm_input_norm.txt" >>"$LOG"
tail -60 "$OUT/bench_mm_input_norm.txt"
[[ $rc -eq 0 ]] || fail "bench_mm_input_norm.py exited $rc (see bench_mm_input_norm.txt)"

step "done: every result is under $OUT"
