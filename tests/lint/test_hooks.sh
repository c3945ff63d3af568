#!/usr/bin/env bash
# test_hooks.sh [ROOT]: the tests' fault hooks reach production code through one door,
# moe/testctl.h. Fails, naming file:line, on each source file of runtime/, profiler/ and
# proto/ (src and include) other than runtime/src/base/testctl.c whose code (comments left
# out: they may name a hook) spells a MOED_TEST_ variable: such a file reads the hook itself
# instead of asking moe_testctl_*.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
door=runtime/src/base/testctl.c
# Comments are stripped by GCC's preprocessor (-fpreprocessed: no includes, no macros; clang
# has no such flag): the first compiler that strips a probe right is used.
strip_comments() { "$cc" -fpreprocessed -dD -E -P -x c "$1" 2>/dev/null; }
cc=
for c in gcc cc; do
  command -v "$c" >/dev/null || continue
  probe=$(printf '/* MOED_TEST_no */ int MOED_TEST_yes; // MOED_TEST_no\n' \
            | "$c" -fpreprocessed -dD -E -P -x c - 2>/dev/null || true)
  if [[ "$probe" == *MOED_TEST_yes* && "$probe" != *MOED_TEST_no* ]]; then cc=$c; break; fi
done
[[ -n "$cc" ]] || { echo "FAIL: no compiler strips comments (gcc -fpreprocessed)" >&2; exit 1; }
dirs=()
for d in runtime/src runtime/include profiler/src profiler/include proto/src proto/include; do
  [[ -d "$root/$d" ]] && dirs+=("$root/$d")
done

bad=0
while IFS= read -r f; do
  rel=${f#"$root"/}
  [[ "$rel" == "$door" ]] && continue
  grep -q 'MOED_TEST_' "$f" || continue
  # the code without its comments (strings kept): cc's preprocessor, no includes expanded
  code=$(strip_comments "$f") || code=$(cat "$f") # unreadable as C: every mention counts
  hooks=$(printf '%s\n' "$code" | grep -oE 'MOED_TEST_[A-Za-z0-9_]*' \
            | sort -u || true)
  [[ -n "$hooks" ]] || continue
  while IFS= read -r h; do
    # name the lines of code (not comment lines) that spell it
    lines=$(grep -nF "$h" "$f" | awk -v h="$h" '{
              c = $0; sub(/^[0-9]+:/, "", c); sub(/\/[*\/].*/, "", c)
              if (c !~ /^[[:space:]]*\*/ && index(c, h) > 0) print }' || true)
    if [[ -z "$lines" ]]; then
      lines=$(grep -nF "$h" "$f" | head -1)
    fi
    while IFS= read -r l; do
      echo "$rel:${l%%:*}: $h read outside $door: ${l#*:}" | sed 's/:[[:space:]]\+/: /2'
    done <<< "$lines"
    bad=$((bad + 1))
  done <<< "$hooks"
done < <(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cpp' \) \
           | LC_ALL=C sort)

if [[ ! -f "$root/$door" ]]; then
  echo "$door: missing: the one file that reads the hooks"
  bad=$((bad + 1))
fi
if [[ $bad -gt 0 ]]; then
  echo "FAIL: $bad test hook(s) read outside $door: ask moe/testctl.h (moe_testctl_*) instead" >&2
  exit 1
fi
echo "OK: only $door reads the MOED_TEST_ hooks"
