#!/usr/bin/env bash
# Issue #19 on a multi-GPU machine (run(kind=nvidia-h200-x4 ...), everything in one call), the tensor-parallel
# part: (1) correctness, check.sh tp over all the GPUs (golden fixtures at TP N against TP 1, a TP-N server
# answering as TP 1, a killed rank ending the server); (2) the all-reduce microbenchmark (NCCL and the one-shot
# peer-memory kernel, decode and prefill sizes); (3) the whole 60-layer model at real widths with random FP8
# weights (--load-format dummy --quantization fp8) at TP N, `m3 bench serve` 1024/1024 at concurrency 4 and 64
# and 8192/1024 at 64. LAYERS=3+25 (say) serves a shorter model where the full one does not fit the GPUs. EP=1:
# the experts split by expert (--enable-expert-parallel) in (1) and (3); DEP=1: data-parallel attention with the
# experts split (--data-parallel-size N --enable-expert-parallel).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0; the device notes say why). Results to $OUT.
source "$(dirname "$0")/env.sh"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c
nvidia-smi topo -m 2>/dev/null | head -$((N + 1))
if [ "${SKIP_TP_CHECK:-0}" != 1 ]; then
  echo "== (1) correctness at TP $N"
  TP=$N timeout 240 bash tools/gpu/check.sh tp 2>&1 | grep -E "^m3 generate|^m3 serve|^killed"
fi
echo "== (2) all-reduce, $N GPUs"
timeout 120 build-gpu/bin/m3-kernel-bench --filter all_reduce --iters 20 2>&1 | grep -E "all_reduce" | head -20
echo "== (3) the whole model, FP8 weights, over $N GPUs ${EP:+with expert parallelism}${DEP:+(DEP)}"
LAYERS=${LAYERS:-3+57}
MODEL=/tmp/m3-full
random_model $MODEL "$LAYERS"
t0=$(date +%s)
PAR="--tensor-parallel-size $N ${EP:+--enable-expert-parallel}"
[ -n "${DEP:-}" ] && PAR="--data-parallel-size $N --enable-expert-parallel"
$M3 serve $MODEL --device cuda --load-format dummy --quantization fp8 $PAR --port 8200 \
  --served-model-name minimax-m3 --max-model-len 16384 --max-num-seqs 64 >"$OUT/full_serve.log" 2>&1 &
server=$!
up 8200
echo "server up after $(($(date +%s) - t0)) s (layers $LAYERS)"
grep -E "memory plan|KV pool|rank [0-9]|error|Error" "$OUT/full_serve.log" | head -12
run() {  # input output concurrency prompts
  timeout "${5:-150}" $M3 bench serve --backend openai --base-url http://127.0.0.1:8200 --model minimax-m3 \
    --tokenizer $MODEL --dataset-name random --random-input-len "$1" --random-output-len "$2" \
    --max-concurrency "$3" --num-prompts "$4" --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --disable-tqdm \
    --save-result --result-dir "$OUT" --result-filename "full_${1}_${2}_c$3.json" 2>&1 |
    grep -E "Successful|Benchmark duration|Output token throughput|Mean TTFT|Median TTFT|P99 TTFT|Mean TPOT|P99 TPOT|Mean ITL|P99 ITL"
}
if curl -sf http://127.0.0.1:8200/health >/dev/null; then
  echo "-- 1024/1024 c4"; run 1024 1024 4 8 120
  echo "-- 1024/1024 c64"; run 1024 1024 64 64 150
  echo "-- 8192/1024 c64"; run 8192 1024 64 64 200
else
  echo "the server did not come up"; tail -20 "$OUT/full_serve.log"
fi
kill -TERM $server 2>/dev/null; wait $server
