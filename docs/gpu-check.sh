#!/bin/bash
# Does CUDA train like the CPU here? For a device call (one GPU machine, no Rust on it): run from
# the repository root with, in .gpu/ (an ignored folder, carried),
#   backend-check-cuda.xz        `cargo build --release --features cuda --example backend_check`
#   backend-check-cuda-fused.xz  the same with `--features cuda,fusion`
# each stripped and xz-compressed, and OUT set to a folder that comes back. Both checks run side
# by side: compiling kernels keeps one CPU core busy per process, and the machine has more.
set -u
OUT=${OUT:-out/gpu-check}; mkdir -p "$OUT"
T0=$(date +%s)
CP=/usr/local/cuda-13.0; [ -d $CP ] || CP=/usr/local/cuda
export CUDA_PATH=$CP
LIBS="$CP/lib64:$CP/lib"
for f in $(find /usr/local /opt /usr/lib -name 'libnvrtc.so*' 2>/dev/null | head -5); do LIBS="$LIBS:$(dirname "$f")"; done
# The toolkit's `stubs` libcuda is for linking only: CUDA_ERROR_STUB_LIBRARY if it is found first.
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$LIBS:$(echo "${LD_LIBRARY_PATH:-}" | tr : "\n" | grep -v stubs | paste -sd:)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for v in cuda cuda-fused; do
  xz -dc ".gpu/backend-check-$v.xz" > "/tmp/bc-$v" && chmod +x "/tmp/bc-$v"
  ( timeout "${BUDGET:-540}" "/tmp/bc-$v" "$@" > "$OUT/check-$v.txt" 2>&1; echo "exit $?" >> "$OUT/check-$v.txt" ) &
done
wait
for v in cuda cuda-fused; do echo "== $v"; grep -v "panicked\|^note:\|^$" "$OUT/check-$v.txt" | tail -30; done
echo "took $(( $(date +%s) - T0 )) s"
