#!/usr/bin/env bash
# equivalence.sh CASE: the distributed output equals the single-rank output.
source "$(dirname "$0")/common.sh"
case "$1" in
  master)      PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' small_model > c.yaml ;;
  master_hosts) MASTER=1 PLACEMENT='{0: [0, 2, 4, 6], 1: [1], 2: [3, 5, 7]}' small_model > c.yaml ;;
  symmetric)   ROUTING=symmetric TOKENS=100 small_model > c.yaml ;;
  gelu)        ROUTING=symmetric ACT=gelu NORM=false K=3 small_model > c.yaml ;;
  capacity_master)    CF=1.0 SKEW=1.5 small_model > c.yaml ;;
  capacity_symmetric) ROUTING=symmetric CF=1.0 SKEW=1.5 TOKENS=100 small_model > c.yaml ;;
  *) fail "unknown case $1" ;;
esac
same_as_one_rank 3
if [[ "$1" == capacity_* ]]; then
  # The limit must really bite, the same way on 1 and on 3 ranks.
  d1=$(grep -o 'capacity: [0-9]* of' one.log) || fail "no capacity line"
  d3=$(grep -o 'capacity: [0-9]* of' many.log) || fail "no capacity line"
  [[ "$d1" == "$d3" ]] || fail "dropped counts differ: '$d1' vs '$d3'"
  [[ "$d1" != "capacity: 0 of" ]] || fail "capacity dropped nothing"
  echo "dropped: $d1"
fi
grep -q 'tokens/s: [0-9]' many.log || fail "no tokens/s line"
echo "PASS $1"
