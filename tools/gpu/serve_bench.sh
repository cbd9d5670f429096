#!/usr/bin/env bash
# Runs on the GPU machine (after check.sh has unpacked build-gpu): `m3 bench serve` against `m3 serve --device
# cuda` on the full-width random model (3 dense + 5 MSA/MoE layers, weights generated on the device with
# --load-format dummy, the real tokenizer): 8192 in / 2048 out at concurrency 32 (the published B200 workload)
# and 1024 / 1024 at concurrency 1, 4 and 64, greedy; then 1024 / 1024 at concurrency 1 and 64 with the model's
# default sampling. SERVE_BENCH_QUICK=1 runs fewer prompts. Results to $OUT.
source "$(dirname "$0")/env.sh"
MODEL=/tmp/m3-random-3p5
random_model $MODEL 3+5
$M3 serve $MODEL --device cuda --load-format dummy --port 8123 --served-model-name minimax-m3 \
  --max-model-len 16384 --max-num-seqs 64 >"$OUT/serve.log" 2>&1 &
server=$!
up 8123 $server
grep -E "memory plan|KV pool|generated" "$OUT/serve.log"
quick=${SERVE_BENCH_QUICK:-0}
run() {  # input output concurrency prompts [extra bench flags]
  local tag="serve_${1}_${2}_c${3}${5:+_sampled}"
  $M3 bench serve --backend openai --base-url http://127.0.0.1:8123 --model minimax-m3 --tokenizer $MODEL \
    --dataset-name random --random-input-len "$1" --random-output-len "$2" --max-concurrency "$3" \
    --num-prompts "$4" --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --disable-tqdm --save-result \
    --result-dir "$OUT" --result-filename "$tag.json" ${5:-} 2>&1 | grep -vE "^\s*$" | tail -26
}
if [ "$quick" = 1 ]; then
  run 1024 1024 1 2; run 8192 2048 32 32
else
  run 1024 1024 1 4; run 1024 1024 4 16; run 1024 1024 64 128; run 8192 2048 32 64
fi
# The model's default sampling (generation_config: temperature 1, top-p 0.95, top-k 40), sampled on the GPU.
SAMPLED="--temperature 1 --top-p 0.95 --top-k 40"
run 1024 1024 1 "$([ "$quick" = 1 ] && echo 2 || echo 4)" "$SAMPLED"
run 1024 1024 64 "$([ "$quick" = 1 ] && echo 64 || echo 128)" "$SAMPLED"
kill -TERM $server; wait $server
