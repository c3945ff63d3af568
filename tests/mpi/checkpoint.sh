#!/usr/bin/env bash
# checkpoint.sh NAMING DTYPE ROUTING: a tiny safetensors checkpoint with Hugging Face names
# (a dense layer first, so model.first_layer: 1) runs, and 3 ranks equal 1 rank.
source "$(dirname "$0")/common.sh"
naming=$1 dtype=$2 routing=$3
H=64 F=96 E=4 TOKENS=40
"$MAKE_CKPT" ckpt.safetensors "$naming" "$dtype" $H $F $E 2 1 $TOKENS input.safetensors \
  || fail "make_checkpoint failed"
H=$H F=$F E=$E TOKENS=$TOKENS FIRST=1 WEIGHTS=ckpt.safetensors INPUT=input.safetensors \
  ROUTING=$routing small_model > c.yaml
same_as_one_rank 3
grep -q "weights $( [[ $naming == mixtral ]] && echo mixtral || echo deepseek)" one.log \
  || { cat one.log; fail "naming not detected"; }
echo "PASS checkpoint $naming $dtype $routing"
