#!/usr/bin/env bash
# The corpus live: each job runs ~20 s while `exporter record` writes its trace (every GPM reading,
# 500 ms) and the daemon's own poller (bench/gpu/live_verdicts.py, 1 s) writes its class, utilization,
# estimates and mismatch at every poll; the job counts its own FLOP/s, bytes/s and steps/s. Then the
# selftest. Run on a GPU machine with PyTorch (and torchvision, transformers) in the repository root:
#
#     bash tools/live_corpus.sh OUTDIR part1|part2|jobs [WHEELS]
#
# part1: the starved ResNet-18, the gather, ResNet-50 bf16 and FP32, INT8 and FP8 GEMMs, the bf16
# GEMM, the skinny GEMM, the CUDA-graph LSTM; part2: Llama decode (eager generate, batch 1) and
# prefill, the CUDA-graph decode, and the selftest; jobs: the names in $JOBS. WHEELS: a folder of wheels for the daemon's own
# dependencies where the machine cannot reach an index. OUTDIR gets the traces (<job>.json), the
# verdicts (<job>.verdicts.jsonl), corpus.log (one LIVE summary line per job) and selftest.md.
set -euo pipefail
out=$1
part=$2
wheels=${3:-}
mkdir -p "$out"
python=${PYTHON:-python3}
if [ -n "$wheels" ]; then
    "$python" -m pip install -q --no-index --find-links "$wheels" prometheus-client nvidia-ml-py pyyaml bcrypt 2>&1 | tail -2 || true
fi
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader | tee "$out/gpu-$part.txt"
case "$part" in
    part1)
        jobs=resnet18_starved,embedding_bag_gather,resnet50_train_bf16,resnet50_train_fp32,matmul_int8_8192,matmul_fp8_8192,matmul_8192,matmul_skinny_b8,lstm_graph_b1
        ;;
    part2)
        jobs=llama_generate_b1,llama_prefill,graph_decode_b1
        ;;
    jobs)
        jobs=${JOBS:?set JOBS to a comma-separated list of job names}
        ;;
    *)
        echo "part1, part2 or jobs (with JOBS=name,...)" >&2
        exit 2
        ;;
esac
"$python" tools/record_corpus.py --out "$out" --only "$jobs" --duration "${DURATION:-20}" --both --budget "${BUDGET:-480}"
mv "$out/corpus.log" "$out/corpus-$part.log"
if [ "$part" = part2 ]; then
    "$python" -m gpueff selftest --markdown > "$out/selftest.md" 2> "$out/selftest.log" || echo "selftest exit $?" >> "$out/selftest.log"
fi
