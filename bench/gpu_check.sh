#!/usr/bin/env bash
# GPU check: the real engine on a CUDA GPU, in one go (about 5 minutes on one modern GPU).
#
#   1. doctor   device, dtype, versions, memory, a smoke test
#   2. profile  step times of gpt2-random (the 124M GPT-2 shape, random weights) in fp16 over the
#               full grid; the calibration batchsim loads
#   3. compare  the four policies simulated with that calibration and measured on the GPU
#               (predicted vs measured table, JSON and figure)
#
# Results go under $OUT when it is set (a device runner collects that folder), else out/gpu_check.
# Offline: gpt2-random needs no download. Any step that fails stops the script (set -e) after
# printing its one-line error.
#
#   bash bench/gpu_check.sh            # or: OUT=/tmp/gpu bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu_check}"
PY="${PY:-python3}"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 MPLBACKEND=Agg
MODEL=(--model gpt2-random --device cuda --dtype fp16)
CAL="$OUT/calibration-gpt2-random-cuda-fp16.json"
# A load that keeps every policy busy for well under a minute on one GPU: ~1 request/s per
# policy-second of the taxi, far below what continuous batching serves.
LOAD=(--requests 60 --rate 3 --prompt-len uniform:32,512 --output-len uniform:16,256
      --max-batch 16 --max-wait 0.1 --max-seqs 64 --max-batched-tokens 4096)

step() { echo; echo "== $*" | tee -a "$OUT/log.txt"; }

step "doctor"
"$PY" -m realrun doctor "${MODEL[@]}" 2>&1 | tee "$OUT/doctor.txt"

step "profile (full grid)"
"$PY" -m realrun profile "${MODEL[@]}" --grid full --out "$CAL" 2>&1 | tee "$OUT/profile.txt"

step "compare: predicted (calibrated batchsim) vs measured (GPU)"
"$PY" -m realrun compare "${MODEL[@]}" "${LOAD[@]}" --calibration "$CAL" --out "$OUT/compare" 2>&1 | tee "$OUT/compare.txt"

step "compare again as JSON (the same workload; a second measurement shows run-to-run spread)"
"$PY" -m realrun compare "${MODEL[@]}" "${LOAD[@]}" --calibration "$CAL" --out "$OUT/compare-json" --no-plots --json > "$OUT/compare.json"
"$PY" - "$OUT/compare.json" <<'EOF' | tee -a "$OUT/log.txt"
import json, sys
obj = json.load(open(sys.argv[1]))
for r in obj["runs"]:
    e = r["error_pct"]
    print(f"{r['label']:12s} req/s err {e['request_throughput']:+6.1f}%  p50 E2E err {e['p50_e2e']:+6.1f}%  "
          f"mean TTFT err {e['mean_ttft']:+6.1f}%  CUDA max alloc {r['meta'].get('cuda_max_memory_allocated_bytes', 0) / 2**20:.0f} MiB")
EOF
step "done: results in $OUT"
