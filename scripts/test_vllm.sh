#!/usr/bin/env bash
# vLLM 0.33.0's OWN offline multimodal tests, on stock vLLM and with mediaref in place.
#
#   VLLM_PYTHON=$VLLM_VENV/bin/python bash scripts/test_vllm.sh [TEST_PATH ...]
#
# VLLM_VENV: the vLLM venv docs/performance.md ("The vLLM 0.33.0 side") makes.
#
# Runs pytest on vLLM 0.33.0's tests (default: tests/multimodal tests/renderers, relative to the
# sdist's root) twice, one run after the other, with the same interpreter, options and files:
#   1. stock: vLLM as installed;
#   2. hooked: the same, with `-p _vllm_hook_plugin` (scripts/_vllm_hook_plugin.py), a pytest
#      plugin that calls mediaref.vllm_hook.install() when imported. pytest imports `-p`
#      plugins before any conftest, so vLLM's tests/conftest.py (which imports
#      vllm.multimodal) already gets mediaref's modules; install() raises if it is too late.
# then scripts/compare_vllm_test_runs.py prints the counts of both runs and every test that
# passes on stock vLLM and not with the hook; last, mediaref's own tests that need vLLM
# (tests/test_vllm_hook.py, test_vllm_input_processor.py, test_serve_wire_vllm_live.py, ~2 min)
# run with VLLM_PYTHON.
# Exit status: non-zero when such a test is not in tests/data/vllm_tests_known_differences.txt
# (one pytest node id a line, `# reason` after it), when one of mediaref's own fails, or when
# a step fails (bad checksum, missing pytest, ...).
#
# Offline and CPU only: both runs have HF_HUB_OFFLINE=1 and VLLM_TARGET_DEVICE=cpu. Tests that
# need a GPU, the network (vLLM's test assets are fetched from S3 / the HF hub) or a model
# download skip or fail/error on BOTH runs, and a test that does not pass on stock vLLM does
# not count. vLLM's own tests/conftest.py is used unchanged (it imports on CPU). Both runs also
# have VLLM_MEDIA_FETCH_MAX_RETRIES=1: offline, every test that fetches one of vLLM's assets
# would otherwise retry with 1 s + 2 s sleeps (no test under tests/multimodal reads that knob).
#
# Inputs (environment):
#   VLLM_PYTHON   required: python of a venv with vllm==0.33.0, mediaref (e.g.
#                 `pip install -e <this repo> --no-deps`), pytest and pytest-asyncio; the tests
#                 also import opencv (cv2), tblib; pytest-timeout is used when present:
#                 $VLLM_PYTHON -m pip install pytest pytest-asyncio pytest-timeout tblib \
#                     opencv-python-headless -c <file holding the venv's torch==X pin>
#   VLLM_SDIST    optional: vllm-0.33.0.tar.gz (its tests/ tree is used); when unset it is
#                 downloaded (curl) from files.pythonhosted.org into the scratch dir. Its sha256
#                 is checked either way.
#   VLLM_TESTS_SCRATCH   scratch dir, outside the repo (default ${TMPDIR:-/tmp}/mediaref-vllm-tests):
#                 the extracted tests (re-extracted on each run), junit xml and logs of both runs.
#   VLLM_TESTS_RUN_TIMEOUT   seconds for each pytest run (default 2400; on expiry pytest gets
#                 SIGINT and still writes its junit xml of the tests run so far)
#   VLLM_TESTS_TEST_TIMEOUT  seconds for one test, with pytest-timeout (default 300)
#
# Time: on a 2-core machine the whole script takes about 24 min for its default paths,
# tests/multimodal and tests/renderers: stock run ~670 s, hooked run ~690 s, each including
# ~30 s of imports and collection, then mediaref's own tests ~70 s (tests/multimodal alone:
# ~14 min). Results (2026-12-06, both paths): stock 865 passed / 107 failed / 14 skipped / 284
# errors, hooked 796 / 176 / 14 / 284, 76 differences: 70 in the allowlist (all under
# tests/multimodal), the 6 others (tests/renderers' warm-up and sparse-guard tests) fixed since;
# mediaref's 14 passed. The stock failures/errors are tests needing the network (vLLM's S3
# assets), an HF model's files (ModelConfig of a hub model, offline) or torchaudio (not
# installed).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
: "${VLLM_PYTHON:?set VLLM_PYTHON to the python of a venv with vllm 0.33.0 (see the header)}"
scratch="${VLLM_TESTS_SCRATCH:-${TMPDIR:-/tmp}/mediaref-vllm-tests}"
run_timeout="${VLLM_TESTS_RUN_TIMEOUT:-2400}"
test_timeout="${VLLM_TESTS_TEST_TIMEOUT:-300}"
sdist_url="https://files.pythonhosted.org/packages/f7/25/aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/vllm-0.33.0.tar.gz"
sdist_sha256="f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
if [ "$#" -gt 0 ]; then test_paths=("$@"); else test_paths=(tests/multimodal tests/renderers); fi

case "$(realpath -m "$scratch")/" in
  "$repo"/*) echo "VLLM_TESTS_SCRATCH must be outside the repo ($repo)" >&2; exit 2 ;;
esac
mkdir -p "$scratch"
start_all=$(date +%s)

# The interpreter: vLLM 0.33.0, pytest, and mediaref importable.
"$VLLM_PYTHON" - <<'EOF'
import importlib.metadata as md
import sys
version = md.version("vllm")
if version != "0.33.0":
    sys.exit(f"VLLM_PYTHON has vllm {version}, not 0.33.0")
for module in ("pytest", "pytest_asyncio", "mediaref.vllm_hook"):
    try:
        __import__(module)
    except ImportError as exc:
        sys.exit(f"VLLM_PYTHON cannot import {module}: {exc} (see scripts/test_vllm.sh's header)")
import mediaref
print(f"vllm {version}; torch {md.version('torch')}; pytest {md.version('pytest')}; "
      f"mediaref from {mediaref.__file__}")
EOF
per_test=()
if "$VLLM_PYTHON" -c "import pytest_timeout" 2>/dev/null; then
  per_test=(--timeout "$test_timeout")
fi

# The sdist, checked.
sdist="${VLLM_SDIST:-$scratch/vllm-0.33.0.tar.gz}"
if [ ! -f "$sdist" ]; then
  [ -z "${VLLM_SDIST:-}" ] || { echo "VLLM_SDIST=$VLLM_SDIST does not exist" >&2; exit 2; }
  echo "downloading $sdist_url"
  curl -fsSL --retry 3 -o "$sdist.part" "$sdist_url"
  mv "$sdist.part" "$sdist"
fi
echo "$sdist_sha256  $sdist" | sha256sum -c --quiet - \
  || { echo "sha256 of $sdist is not $sdist_sha256" >&2; exit 2; }

# Its tests/ tree and pyproject.toml (pytest's config: the markers), freshly extracted.
src="$scratch/vllm-0.33.0"
rm -rf "$src"
tar -xzf "$sdist" -C "$scratch" vllm-0.33.0/tests vllm-0.33.0/pyproject.toml

# One pytest run; $1: stock|hooked, the rest: extra pytest options. Runs in the sdist's root so
# vLLM's `tests` package and conftest.py are found as in vLLM's CI (rootdir = sdist root).
run_pytest() {
  local label="$1"
  shift
  local t0 rc=0
  t0=$(date +%s)
  echo "== $label run: pytest ${test_paths[*]} (log: $scratch/$label.log)"
  (
    cd "$src"
    HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu VLLM_MEDIA_FETCH_MAX_RETRIES=1 \
      timeout -s INT -k 120 "$run_timeout" "$VLLM_PYTHON" -m pytest \
      -p no:cacheprovider -q -rfE -o junit_family=xunit1 --continue-on-collection-errors \
      "${per_test[@]}" \
      --junitxml "$scratch/$label.xml" "$@" "${test_paths[@]}"
  ) >"$scratch/$label.log" 2>&1 || rc=$?
  tail -n 1 "$scratch/$label.log"
  echo "   $label run: pytest exit status $rc, $(($(date +%s) - t0)) s"
  if [ "$rc" -ge 2 ] && [ "$rc" -ne 124 ]; then
    # 0: all passed, 1: some failed; anything else (interrupted, usage, internal error) is shown.
    echo "   (pytest did not finish normally: see $scratch/$label.log)"
  fi
  [ -s "$scratch/$label.xml" ] || { echo "no junit xml from the $label run" >&2; exit 2; }
}

rm -f "$scratch/stock.xml" "$scratch/hooked.xml"
run_pytest stock
PYTHONPATH="$repo/scripts${PYTHONPATH:+:$PYTHONPATH}" run_pytest hooked -p _vllm_hook_plugin
grep -m1 "mediaref vllm_hook installed" "$scratch/hooked.log" || true

echo "== comparison"
rc=0
python3 "$repo/scripts/compare_vllm_test_runs.py" "$scratch/stock.xml" "$scratch/hooked.xml" \
  --allow "$repo/tests/data/vllm_tests_known_differences.txt" || rc=$?

# mediaref's own tests that need vLLM itself (skipped by the default run): the launcher's hook in
# a spawned engine core, and live responses read by vLLM's decoder and request model.
echo "== mediaref's tests against vLLM 0.33.0"
(
  cd "$repo"
  MEDIAREF_VLLM_PYTHON="$VLLM_PYTHON" "$VLLM_PYTHON" -m pytest -p no:cacheprovider -q \
    tests/test_vllm_hook.py tests/test_vllm_input_processor.py tests/test_serve_wire_vllm_live.py
) >"$scratch/mediaref.log" 2>&1 || rc=$?
tail -n 1 "$scratch/mediaref.log"
echo "total wall time: $(($(date +%s) - start_all)) s"
exit "$rc"
