#!/usr/bin/env bash
# The transfer experiment of docs/finetune.md: resnet20 trained on Fashion-MNIST classes 0-4 (A, all 30000
# images), then classes 5-9 (B, 100 training images per class, all 5000 test images) from scratch against
# fine-tuned from A (train.init + train.init_fresh=["fc"]), lr 0.1 and 0.01, seeds 0-2; one line per run.
# usage: tools/bench/transfer_experiment.sh [KILN=build/tools/kiln] [WORK=/tmp/kiln_transfer]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kiln=$(realpath "${1:-$root/build/tools/kiln}")
work=${2:-/tmp/kiln_transfer}
mkdir -p "$work" && cd "$work"
[[ -d fm/train ]] || "$kiln" data export "$root/configs/fashion_mnist_resnet20.json" out=fm format=png >/dev/null
rm -rf A B runs && mkdir -p A/train A/val B/train B/val
# The export's folder of label $1: "3_Dress" (an export from before the class names: "3").
folder() { for d in fm/train/"$1"_* fm/train/"$1"; do [[ -d $d ]] && { basename "$d"; return; }; done; exit 1; }
for c in 0 1 2 3 4; do f=$(folder $c); ln -s "$work/fm/train/$f" A/train/$c; ln -s "$work/fm/val/$f" A/val/$c; done
for c in 5 6 7 8 9; do
  d=$(folder $c)
  mkdir B/train/$c
  ls "fm/train/$d" | sort | head -100 | while read -r f; do ln -s "$work/fm/train/$d/$f" "B/train/$c/$f"; done
  ln -s "$work/fm/val/$d" B/val/$c
done
cat >base.json <<JSON
{
  "name": "tx",
  "model": {"name": "resnet20", "in_channels": 1, "num_classes": 5},
  "data": {
    "source": "image_folder", "channels": 1, "root": "$work/A",
    "train_transforms": [{"type": "random_crop", "size": 28, "padding": 2}, {"type": "horizontal_flip"},
                         {"type": "normalize", "mean": [0.286], "std": [0.353]}],
    "val_transforms": [{"type": "center_crop", "size": 28}, {"type": "normalize", "mean": [0.286], "std": [0.353]}],
    "batch_size": 128, "workers": 2
  },
  "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4, "no_decay_bn_bias": true},
  "schedule": {"name": "cosine", "warmup_epochs": 0.5},
  "train": {"epochs": 2, "seed": 0, "runs_dir": "$work/runs", "plots": false}
}
JSON
"$kiln" train base.json name=A >A.log 2>&1
echo "A: $(grep final A.log)"
for seed in 0 1 2; do
  for v in "scratch lr0.1|optim.lr=0.1" "scratch lr0.01|optim.lr=0.01" \
           "init lr0.01|optim.lr=0.01 train.init=runs/A train.init_fresh=[\"fc\"]" \
           "init lr0.1|optim.lr=0.1 train.init=runs/A train.init_fresh=[\"fc\"]"; do
    label=${v%%|*}
    # shellcheck disable=SC2086  # the overrides are separate words
    "$kiln" train base.json name=B data.root="$work/B" data.batch_size=64 epochs=15 train.eval_every=15 \
      train.seed=$seed ${v#*|} >B.log 2>&1
    echo "B $label seed $seed: $(grep final B.log)"
  done
done
