#!/usr/bin/env bash
# Issue #19 on a multi-GPU machine (run(kind=nvidia-h200-x4 ...), everything in one call), the tensor-parallel
# part: (1) correctness, check.sh tp over all the GPUs (golden fixtures at TP N against TP 1, a TP-N server
# answering as TP 1, a killed rank ending the server); (2) the all-reduce microbenchmark (NCCL and the one-shot
# peer-memory kernel, decode and prefill sizes); (3) the whole 60-layer model at real widths with random FP8
# weights (--load-format dummy --quantization fp8) at TP N, `m3 bench serve` 1024/1024 at concurrency 4 and 64
# and 8192/1024 at 64 (WORKLOADS overrides; LONG=131072 adds one prompt of that length, in
# the layouts LONG_LAYOUTS names, default all). LAYERS=3+25 (say) serves
# a shorter model where the full one does not fit the GPUs. EP=1: the experts split by expert
# (--enable-expert-parallel) in (1) and (3); DEP=1: data-parallel attention with the experts split
# (--data-parallel-size N --enable-expert-parallel). LAYOUTS="tp ep dep" runs (3) in each of them; SERVE_ARGS adds
# serve flags (e.g. --max-num-batched-tokens 2048).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0; the device notes say why). Results to $OUT.
source "$(dirname "$0")/env.sh"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c
nvidia-smi topo -m 2>/dev/null | head -$((N + 1))
if [ "${SKIP_TP_CHECK:-0}" != 1 ]; then
  echo "== (1) correctness at TP $N"
  TP=$N timeout 240 bash tools/gpu/check.sh tp 2>&1 | grep -E "^m3 generate|^m3 serve|^killed"
fi
if [ "${SKIP_ALL_REDUCE:-0}" != 1 ]; then
  echo "== (2) all-reduce, $N GPUs"
  timeout 120 build-gpu/bin/m3-kernel-bench --filter all_reduce --iters 20 2>&1 | grep -E "all_reduce" | head -20
fi
LAYERS=${LAYERS:-3+57}
MODEL=/tmp/m3-full
random_model $MODEL "$LAYERS"
bench() {  # input output concurrency prompts timeout
  timeout "${5:-150}" $M3 bench serve --backend openai --base-url http://127.0.0.1:8200 --model minimax-m3 \
    --tokenizer $MODEL --dataset-name random --random-input-len "$1" --random-output-len "$2" \
    --max-concurrency "$3" --num-prompts "$4" --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --disable-tqdm \
    --save-result --result-dir "$OUT" --result-filename "full_${LAYOUT}_${1}_${2}_c$3.json" 2>&1 |
    grep -E "Successful|Benchmark duration|Output token throughput|Mean TTFT|Median TTFT|P99 TTFT|Mean TPOT|P99 TPOT|Mean ITL|P99 ITL"
}
# WORKLOADS: "input/output/concurrency/prompts/timeout ..."; LONG: a prompt of that many tokens, alone (TTFT, TPOT).
WORKLOADS=${WORKLOADS:-1024/1024/4/8/120 1024/1024/64/64/150 8192/1024/64/64/200}
DEFAULT_LAYOUT=tp; [ -n "${EP:-}" ] && DEFAULT_LAYOUT=ep; [ -n "${DEP:-}" ] && DEFAULT_LAYOUT=dep
for LAYOUT in ${LAYOUTS:-$DEFAULT_LAYOUT}; do
  case $LAYOUT in
    tp) PAR="--tensor-parallel-size $N" ;;
    ep) PAR="--tensor-parallel-size $N --enable-expert-parallel" ;;
    dep) PAR="--data-parallel-size $N --enable-expert-parallel" ;;
  esac
  echo "== (3) the whole model ($LAYERS layers), FP8 weights, over $N GPUs: $PAR"
  long=${LONG:-0}; [[ " ${LONG_LAYOUTS:-$LAYOUT} " == *" $LAYOUT "* ]] || long=0
  LEN=$((long > 16384 ? long + 1024 : 16384))
  t0=$(date +%s)
  $M3 serve $MODEL --device cuda --load-format dummy --quantization fp8 $PAR --port 8200 \
    --served-model-name minimax-m3 --max-model-len $LEN --max-num-seqs 64 ${SERVE_ARGS:-} >"$OUT/full_${LAYOUT}_serve.log" 2>&1 &
  server=$!
  up 8200 $server
  echo "server up after $(($(date +%s) - t0)) s"
  grep -E "memory plan|KV pool|rank [0-9]|error|Error" "$OUT/full_${LAYOUT}_serve.log" | head -12
  if curl -sf http://127.0.0.1:8200/health >/dev/null; then
    for w in $WORKLOADS; do
      IFS=/ read -r i o c p t <<<"$w"
      echo "-- $i/$o c$c"; bench "$i" "$o" "$c" "$p" "$t"
    done
    [ "$long" -gt 0 ] && { echo "-- one prompt of $long tokens"; bench "$long" 64 1 1 "${LONG_TIMEOUT:-240}"; }
  else
    echo "the server did not come up"; tail -20 "$OUT/full_${LAYOUT}_serve.log"
  fi
  kill -TERM $server 2>/dev/null; wait $server
done
