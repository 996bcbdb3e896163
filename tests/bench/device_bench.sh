#!/usr/bin/env bash
# `gpufleet bench --here` on a real GPU machine, from this checkout, with that machine's own python3 and
# PyTorch: it installs nothing and needs no network. Full shapes (ResNet-50 at 256 images, BERT-large
# phase 1 at 128 sequences of 128 tokens, llm:1b = Llama 3.2 1B's shape at 8,192 tokens), then the
# model's prediction for the GPU beside each measurement, recorded as `--record` records it.
#
#   OUT=/some/folder INSTANCE=p5en.48xlarge bash tests/bench/device_bench.sh
#
# Writes $OUT/bench.json (what `gpufleet --json bench --here --record` prints), $OUT/bench.err (the
# progress lines) and $OUT/data/gpufleet/calibration/measured.json (the recorded rows). Five minutes at most.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/build/bench-out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
# gpufleet is two folders of the tree (pyproject's package-dir: infra/ is gpufleet, cli/ is gpufleet.cli):
# a folder of links to them imports as the installed package does (as `make lint` reads it)
TREE=$(mktemp -d)
trap 'rm -rf "$TREE"' EXIT
mkdir "$TREE/gpufleet"
for f in "$ROOT"/infra/*; do ln -s "$f" "$TREE/gpufleet/"; done
ln -s "$ROOT/cli" "$TREE/gpufleet/cli"
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' >&2
export PYTHONPATH=$TREE${PYTHONPATH:+:$PYTHONPATH} XDG_DATA_HOME=$OUT/data XDG_CONFIG_HOME=$OUT/config
# BENCH_ARGS: --record by default; `--tiny` tries the script on a machine without a GPU
# shellcheck disable=SC2086
timeout 300 "$PYTHON" -m gpufleet.cli --json bench --here ${BENCH_ARGS:---record} --instance "${INSTANCE:-}" \
    --workload "${WORKLOADS:-resnet50,bert-large,llm:1b}" >"$OUT/bench.json" 2> >(tee "$OUT/bench.err" >&2)
echo "wrote $OUT/bench.json" >&2
