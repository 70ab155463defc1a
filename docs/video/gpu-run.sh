#!/bin/bash
# The pre-registered GPU run (preregistered-gpu-run.md), as it ran on 2026-12-04 (call 3
# there): one device call that probes the step time, trains for the time left, benches, then draws
# more. Run from the repository root with the stripped, xz-compressed binaries of
# `cargo build --release --features cuda --example video` and `-p xtask --features cuda` in .gpu/,
# the judge panel in .gpu/judge, and OUT set to a folder for the logs and the model.
set -u
OUT=${OUT:-out/gpu-run}; mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${BUDGET:-545}          # seconds until every GPU process must be done
END=$((T0 + BUDGET))
S="$OUT/script.log"
now() { date +%s; }
say() { echo "[$(( $(now) - T0 ))s] $*" | tee -a "$S"; }
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | tee -a "$S"
nproc | tee -a "$S"
xz -dc ${VIDEO_XZ:-.gpu/video-cuda.xz} > /tmp/video && chmod +x /tmp/video
XT=${XTASK_XZ:-.gpu/xtask-cuda.xz}; [ -f "$XT" ] && xz -dc "$XT" > /tmp/xtask && chmod +x /tmp/xtask
NVCC=$(command -v nvcc || true)
if [ -n "$NVCC" ]; then CP=$(dirname "$(dirname "$(readlink -f "$NVCC")")"); else CP=/usr/local/cuda; fi
export CUDA_PATH=$CP
LIBS="$CP/lib64:$CP/lib"
for f in $(find /usr/local /opt /usr/lib -name 'libnvrtc.so*' 2>/dev/null | head -5); do LIBS="$LIBS:$(dirname "$f")"; done
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$LIBS:$(echo "${LD_LIBRARY_PATH:-}" | tr : "\n" | grep -v stubs | paste -sd:)"
say "CUDA_PATH=$CUDA_PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ls "$CP/include/cuda_fp16.h" 2>&1 | tee -a "$S"

printf '[compilation]\ncache = "target"\n\n[autotune]\nlevel = "minimal"\n' > cubecl.toml
( while true; do
    echo "$(( $(now) - T0 ))s gpu $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null) cpu $(ps -C video,xtask -o pcpu= 2>/dev/null | tr '\n' ' ') files $(find target -type f 2>/dev/null | wc -l)"
    sleep 5
  done > "$OUT/monitor.log" 2>&1 ) &
MON=$!
CFG=${CFG:-"--layers 8 --d-model 256 --heads 8 --batch 64 --lr 0.001 --seed 1337 --judge .gpu/judge"}

# 1. Probe: seconds a step between steps 40 and 80, then killed.
P0=$(date +%s.%N)
( /tmp/video $CFG --steps 800 --eval-every 40 --eval-clips 4 --out /tmp/probe --save /tmp/probe/model 2>&1 | stamp > "$OUT/probe.log" ) &
while [ $(( $(now) - T0 )) -lt ${PROBE_LIMIT:-250} ]; do
  awk '$2=="step" && $3=="80" {f=1} END {exit !f}' "$OUT/probe.log" && break
  grep -q 'panicked' "$OUT/probe.log" && break
  [ $(( $(now) - T0 )) -gt 20 ] && ! pgrep -f '^/tmp/video' > /dev/null && break
  sleep 1
done
pkill -f '^/tmp/video' ; sleep 1; pkill -9 -f '^/tmp/video'
cat "$OUT/probe.log" | tee -a "$S"
T40=$(awk '$2=="step" && $3=="40" {print $1}' "$OUT/probe.log")
T80=$(awk '$2=="step" && $3=="80" {print $1}' "$OUT/probe.log")
TF=$(awk '/first 10 steps took/ {print $1; exit}' "$OUT/probe.log")
if [ -z "$T40" ] || [ -z "$T80" ]; then
  say "probe did not reach step 80; bench instead"
  [ -x /tmp/xtask ] && timeout $(( END - $(now) )) /tmp/xtask bench video --rounds 2 --steps 10 --batch 16 2>&1 | stamp | tee -a "$S"
  kill $MON; say done; exit 1
fi
calc() { python3 -c "import math; print($1)"; }
SPS=$(calc "($T80 - $T40) / 40")
STARTUP=$(calc "${TF:-$T40} - $P0")
say "probe: $SPS s a step (steps 40-80, 1 small eval included), start-up to step 10: $STARTUP s"

# 2. The run. Reserve: start-up (as the probe's), final judging 45 s, bench 55 s.
LEFT=$(( END - $(now) ))
STEPS=$(calc "max(8, int(($LEFT - 0.4 * $STARTUP - 15 - 45 - 30) / $SPS / 8) * 8)")
EVAL=$((STEPS / 8))
if [ "$STEPS" -lt 400 ]; then
  say "only $STEPS steps would fit; bench instead"
  [ -x /tmp/xtask ] && timeout $(( END - $(now) )) /tmp/xtask bench video --rounds 2 --steps 10 --batch 16 2>&1 | stamp | tee -a "$S"
  kill $MON; say done; exit 1
fi
say "run: $STEPS steps, a checkpoint every $EVAL (time left $LEFT s)"
M0=$(now)
timeout $(( END - $(now) - 30 )) /tmp/video $CFG --steps "$STEPS" --eval-every "$EVAL" --out /tmp/run --save /tmp/run/model 2>&1 | stamp > "$OUT/run.log"
say "run ended rc=$? after $(( $(now) - M0 )) s"
tail -20 "$OUT/run.log" | tee -a "$S"

# 3. Speed: factorised against full attention on this GPU (the default 4-block model).
if [ -x /tmp/xtask ] && [ $(( END - $(now) )) -gt 40 ]; then
  timeout $(( END - $(now) - 5 )) /tmp/xtask bench video --rounds 3 --steps 10 --batch 16 2>&1 | tee -a "$S"
fi

# 4. Guidance 3 and 5 on noise set 0, while time lasts.
for g in 3 5; do
  [ $(( END - $(now) )) -gt 30 ] || break
  timeout $(( END - $(now) )) /tmp/video --load /tmp/run/model --steps 0 --guidance $g --judge .gpu/judge --out /tmp/g$g 2>&1 | grep -v '^$' | tail -6 | tee -a "$S"
done

# 5. Bring back the model (split under 16 MiB a file) and one sheet.
G=$(ls -t /tmp/run/*.gif 2>/dev/null | head -1); [ -n "$G" ] && cp "$G" "$OUT/"
ls -la /tmp/run /tmp/run/model | tee -a "$S"
tar -cf - -C /tmp/run model | split -b 15m - "$OUT/model.tar.part-"
ls -la "$OUT" | tee -a "$S"
kill $MON
say done
