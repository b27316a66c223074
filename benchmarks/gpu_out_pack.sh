#!/usr/bin/env bash
# Pack a study's output folder into OUT in files the device tool brings back (at most 8 files, 16 MiB each, 64 MiB
# together; a file over 16 MiB does not come back at all). benchmarks/gpu_study.sh calls it, whatever the study did:
#   study.tgz         the records: result.json, lm-eval's results_*.json, eval_spec.json, logs, recipe.yaml, the
#                     report; not the checkpoints (train/) nor lm-eval's per-sample files. ~2 MB for 4 runs at 8k/16k
#   samples.tgz.<i>   lm-eval's samples_*.jsonl (--log_samples: ~16 MB a run at 8k/16k, ~4 MB gzipped), in pieces of
#                     PIECE bytes (default 15M); rejoin with: cat samples.tgz.* | tar -xz
# One archive of both was 16.9 MiB for command 1 of study/gpu_smollm2_seeds.yaml (4 runs; simulated 2026-12-03).
#   bash benchmarks/gpu_out_pack.sh OUT FOLDER
set -uo pipefail
OUT=${1:?usage: gpu_out_pack.sh OUT FOLDER}; DIR=${2:?usage: gpu_out_pack.sh OUT FOLDER}; PIECE=${PIECE:-15M}
[[ -d $DIR ]] || { echo "gpu_out_pack.sh: FOLDER $DIR is not a folder (the study wrote nothing there)"; exit 2; }
mkdir -p "$OUT" || exit 2
rc=0
tar -czf "$OUT/study.tgz" --exclude='*/train' --exclude='*/train/*' --exclude='samples_*.jsonl' "$DIR" || rc=1
find "$DIR" -name train -prune -o -name 'samples_*.jsonl' -print0 | tar -czf - --null -T - \
  | split -b "$PIECE" -d -a 1 - "$OUT/samples.tgz." || rc=1
ls -l "$OUT"
exit $rc
