#!/usr/bin/env bash
# GPU check: the real engine on a CUDA GPU, in one go (about 6 minutes on one H200).
#
#   1. doctor     device, dtype, versions, memory, a smoke test
#   2. roofline   bench/gpu_roofline.py: what fraction of the datasheet's bandwidth and compute the
#                 GPU's own products and attention reach in Llama-3-8B's shapes (bf16, and FP8
#                 where the GPU has it): the efficiencies batchsim's roofline model assumes
#   3. profile    step times of gpt2-random (the 124M GPT-2 shape, random weights) in fp16 over the
#                 full grid; the calibration batchsim loads
#   4. compare    the four policies simulated with that calibration and measured on the GPU, each
#                 policy's rate set for 70 % busy (a figure at light load proves nothing), two
#                 interleaved repeats; then continuous and dynamic near saturation (95 % busy)
#
#   bash bench/gpu_check.sh                 # on the GPU
#   bash bench/gpu_check.sh --device cpu    # a dry run of every step on a CPU (tiny-gpt2, small load)
#
# Everything goes to $RESULTS (default out/gpu_check), and is packed at the end, whatever stopped
# the script, into $OUT/gpu_check.tar.gz when OUT is set (a device runner brings back only a few
# files from $OUT). Offline: gpt2-random needs no download. Each step has a time limit of its own
# (STEP_LIMIT seconds), so one slow step cannot take the rest of a lease; a step that fails or
# runs out is noted in log.txt and the next one runs.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda
if [ "${1:-}" = "--device" ]; then DEVICE="${2:?--device needs cuda or cpu}"; fi
case "$DEVICE" in cuda|cpu) ;; *) echo "gpu_check: --device must be cuda or cpu, got '$DEVICE'" >&2; exit 2;; esac
RESULTS="${RESULTS:-out/gpu_check}"
PY="${PY:-python3}"
STEP_LIMIT="${STEP_LIMIT:-240}"
mkdir -p "$RESULTS"
export HF_HUB_OFFLINE=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1

if [ "$DEVICE" = cuda ]; then
  MODEL=(--model gpt2-random --device cuda --dtype fp16)
  GRID=${GRID:-full}; ROOF=(--device cuda); N=60; NSAT=120
else
  MODEL=(--model tiny-gpt2 --device cpu --threads 1)
  GRID=quick; ROOF=(--device cpu --small); N=16; NSAT=24
fi
CAL="$RESULTS/calibration.json"
# Lengths as a chat load has them, with the taxi's run short enough for a lease: the rate is set
# per policy by --busy, so the arrival shape (Poisson) and lengths are all this fixes.
LOAD=(--prompt-len uniform:32,512 --output-len uniform:16,128
      --max-batch 16 --max-wait 0.1 --max-seqs 64 --max-batched-tokens 4096)

pack() {
  if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/gpu_check.tar.gz" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")"
    cp "$RESULTS/log.txt" "$OUT/log.txt" 2>/dev/null
  fi
}
trap pack EXIT

# step NAME FILE CMD...: run one step under its time limit, its output to the screen and to FILE.
step() {
  local name="$1" file="$2"; shift 2
  local t0=$SECONDS
  echo; echo "== $name" | tee -a "$RESULTS/log.txt"
  timeout -s INT "$STEP_LIMIT" "$@" 2>&1 | tee "$RESULTS/$file"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$RESULTS/log.txt"
}

{ date -u +%FT%TZ; uname -srm; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null;
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
  | tee "$RESULTS/machine.txt"

step "doctor" doctor.txt "$PY" -m realrun doctor "${MODEL[@]}"
step "roofline (products and attention against the datasheet)" roofline.txt \
  "$PY" bench/gpu_roofline.py "${ROOF[@]}" --json "$RESULTS/roofline.json"
step "profile ($GRID grid)" profile.txt "$PY" -m realrun profile "${MODEL[@]}" --grid "$GRID" --out "$CAL" --no-progress
if [ -f "$CAL" ]; then
  step "compare at 70 % busy: four policies, two interleaved repeats" compare-70.txt \
    "$PY" -m realrun compare "${MODEL[@]}" "${LOAD[@]}" --requests "$N" --busy 0.7 --repeats 2 \
      --calibration "$CAL" --out "$RESULTS/compare-70" --no-progress --explain
  step "compare near saturation (95 % busy): continuous and dynamic" compare-95.txt \
    "$PY" -m realrun compare "${MODEL[@]}" "${LOAD[@]}" --requests "$NSAT" --busy 0.95 --policy continuous,dynamic \
      --calibration "$CAL" --out "$RESULTS/compare-95" --no-progress --explain
else
  echo "== no calibration was written: compare skipped" | tee -a "$RESULTS/log.txt"
fi
echo "== done: results in $RESULTS" | tee -a "$RESULTS/log.txt"
