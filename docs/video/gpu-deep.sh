#!/bin/bash
# As run on 2026-12-04 (second lease): OUT=$OUT BUDGET=565 bash .gpu/deep.sh, with .gpu/ holding
# the stripped, xz-compressed `--features cuda` video binary (then fused), the judge panel, and
# deep.tar.xz (train/checkpoint, model/training.json and log.txt of out/video-deep at step 3,500).
# One device call: continue the 8-block CPU run (docs/video/deep-run) on the GPU from its resume
# state, until the budget is spent, then bring the newest resume state back (split < 16 MiB).
set -u
OUT=${OUT:-out/gpu-deep}; mkdir -p "$OUT"
T0=$(date +%s); BUDGET=${BUDGET:-560}; END=$((T0 + BUDGET))
S="$OUT/script.log"
now() { date +%s; }
say() { echo "[$(( $(now) - T0 ))s] $*" | tee -a "$S"; }
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(( $(date +%s) - T0 ))" "$l"; done; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | tee -a "$S"
if [ -n "${LOCAL:-}" ]; then BIN=$LOCAL; else
  xz -dc .gpu/video-cuda.xz > /tmp/video && chmod +x /tmp/video; BIN=/tmp/video
  CP=/usr/local/cuda-13.0; [ -d $CP ] || CP=/usr/local/cuda
  export CUDA_PATH=$CP
  LIBS="$CP/lib64:$CP/lib"
  for f in $(find /usr/local /opt /usr/lib -name 'libnvrtc.so*' 2>/dev/null | head -5); do LIBS="$LIBS:$(dirname "$f")"; done
  export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$LIBS:$(echo "${LD_LIBRARY_PATH:-}" | tr : "\n" | grep -v stubs | paste -sd:)"
  printf '[compilation]\ncache = "target"\n\n[autotune]\nlevel = "minimal"\n' > cubecl.toml
fi
say "bin $BIN; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
D=/tmp/deep; rm -rf $D; mkdir -p $D
xz -dc .gpu/deep.tar.xz | tar -xf - -C $D
ls -la $D $D/train/checkpoint $D/model | tee -a "$S"
( while true; do
    echo "$(( $(now) - T0 ))s gpu $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null) cpu $(ps -C video -o pcpu= 2>/dev/null | tr '\n' ' ')"
    sleep 10
  done >> "$S" 2>&1 ) &
MON=$!
say "start"
timeout -s TERM $(( END - $(now) )) $BIN --layers 8 --steps 20000 --out $D --save $D/model --judge .gpu/judge --resume --plain 2>&1 | stamp > "$OUT/run.log"
say "run ended rc=${PIPESTATUS[0]}"
kill $MON 2>/dev/null
sleep 2; pkill -9 -f "$BIN" 2>/dev/null
tail -25 "$OUT/run.log" | tee -a "$S"
ls -la $D/train/checkpoint $D/model $D/model/transformer | tee -a "$S"
(cd $D && tar -cf - $(ls -d train/checkpoint model log.txt checkpoints.json 2>/dev/null)) | split -b 15m - "$OUT/deep.tar.part-"
if [ -z "${LOCAL:-}" ]; then
  du -sh target 2>/dev/null | tee -a "$S"
  tar -cf - target cubecl.toml 2>/dev/null | timeout 20 xz -T0 -3 > /tmp/cache.tar.xz
  ls -la /tmp/cache.tar.xz | tee -a "$S"
  [ $(stat -c %s /tmp/cache.tar.xz) -lt 16000000 ] && cp /tmp/cache.tar.xz "$OUT/"
fi
ls -la "$OUT" | tee -a "$S"
say done
