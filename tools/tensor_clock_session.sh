#!/usr/bin/env bash
# A device session (issue 43): what a busy tensor cycle does and at which clock (bench/gpu/tensor_clock.py),
# the zero-copy, ViT, bf16 GEMM and job-start-from-idle jobs recorded into the corpus with their own
# counts while the daemon's poller runs beside each (tools/record_corpus.py --both: the trace, and
# the class, estimates and mismatch at every poll: the live check of the link rule, the estimate and
# the verdict within two polls of a start), and Nsight Compute's per-kernel clock and tensor counters
# for one bf16 and one TF32 GEMM (--clock-control none: the clocks are left alone). About 7 minutes.
#
#     bash tools/tensor_clock_session.sh OUTDIR
set -uo pipefail
out=$1
mkdir -p "$out/corpus"
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.sm,pcie.link.gen.current,pcie.link.width.current --format=csv > "$out/gpu.txt" 2>&1
"$python" -c "import pynvml, cupy, torch; print('nvidia-ml-py', pynvml.__file__, 'cupy', cupy.__version__, 'torch', torch.__version__)" >> "$out/gpu.txt" 2>&1
ls -d /usr/share/datacenter-gpu-manager-4 /usr/local/dcgm /opt/nvidia/nsight-compute/* >> "$out/gpu.txt" 2>&1
timeout 120 "$python" bench/gpu/tensor_clock.py --output "$out/clock.json" > "$out/clock.log" 2>&1 || echo "clock exit $?" >> "$out/clock.log"
timeout 230 "$python" tools/record_corpus.py --out "$out/corpus" --only "${JOBS:-zerocopy_read,zerocopy_write,zerocopy_gather,vit_b16_train_bf16,matmul_8192,matmul_from_idle}" --duration "${DURATION:-15}" --both --budget 200 > "$out/corpus.out" 2>&1 || echo "corpus exit $?" >> "$out/corpus.out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
if [ -n "$ncu" ]; then
    timeout 30 "$ncu" --query-metrics > "$out/ncu-metrics.txt" 2>&1
    metrics=$("$python" bench/gpu/tensor_clock.py --ncu-metrics "$out/ncu-metrics.txt")
    echo "$metrics" > "$out/ncu-chosen.txt"
    for precision in bf16 tf32; do
        timeout 60 "$ncu" --clock-control none --launch-skip 20 --launch-count 2 --metrics "$metrics" --csv --page raw \
            "$python" bench/gpu/tensor_clock.py --ncu "$precision" > "$out/ncu-$precision.csv" 2> "$out/ncu-$precision.err" || echo "ncu exit $?" >> "$out/ncu-$precision.err"
    done
else
    echo "no ncu on PATH" > "$out/ncu-metrics.txt"
fi
