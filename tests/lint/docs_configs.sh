#!/usr/bin/env bash
# docs_configs.sh MOED MAKE_CHECKPOINT SOURCE_DIR: every config shown in README.md and
# docs/*.md passes `moed --check-config --ranks 3`.
#
# The rule (docs/tests.md says it too): every fenced block opened with ```yaml is a whole
# moed config, as a reader would copy it into a file; YAML that is not a moed config, or
# only part of one, is opened with ```yaml fragment and is not run. Paths that stand for
# the reader's own files are replaced by fixtures made here, in this table only:
#   /models/DeepSeek-V3    a tiny DeepSeek-V3 checkpoint directory (make_checkpoint --dir:
#                          deepseek_v3, BF16, hidden 64, 8 experts, 6 layers, layer 0 dense)
#   /data/x.safetensors    its input tensor (64 tokens)
# A block naming any other file that does not exist fails (exit 4): add a fixture here.
set -u
moed=$(realpath "$1") mkck=$(realpath "$2") src=$(realpath "$3")
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
mkdir ckpt-dsv3 && "$mkck" --dir ckpt-dsv3 deepseek_v3 bf16 64 48 8 2 6 1 64 > mkck.log 2>&1 \
  || { cat mkck.log; echo "FAIL: make_checkpoint"; exit 1; }
python3 - "$src" <<'EOP' || { echo "FAIL: could not extract the blocks"; exit 1; }
import os, re, sys
src = sys.argv[1]
files = ['README.md'] + sorted('docs/' + f for f in os.listdir(os.path.join(src, 'docs'))
                               if f.endswith('.md'))
n = 0
for f in files:
    block, start = None, 0
    for no, line in enumerate(open(os.path.join(src, f), encoding='utf-8'), 1):
        m = re.match(r'^(\s*)```\s*(.*?)\s*$', line)
        if block is None and m and m.group(2) == 'yaml':
            block, start, indent = [], no, len(m.group(1))
        elif block is not None and m and m.group(2) == '':
            n += 1
            name = 'block%03d.yaml' % n
            open(name, 'w').write(''.join(block))
            open(name + '.where', 'w').write('%s:%d' % (f, start))
            block = None
        elif block is not None:
            block.append(line[indent:] if indent == 0 or line[:indent].isspace() else line.lstrip())
print('%d yaml blocks' % n)
EOP
blocks=(block*.yaml)
[[ -e ${blocks[0]} ]] || { echo "FAIL: no \`\`\`yaml block found in README.md or docs/"; exit 1; }
fails=0
for b in "${blocks[@]}"; do
  sed -i -e "s#/models/DeepSeek-V3#$tmp/ckpt-dsv3#g" \
         -e "s#/data/x.safetensors#$tmp/ckpt-dsv3/input.safetensors#g" "$b"
  where=$(cat "$b.where")
  if out=$("$moed" --config "$b" --check-config --ranks 3 2>&1); then
    echo "ok   $where"
  else
    rc=$?
    echo "FAIL $where: moed --check-config exit $rc:"
    sed 's/^/       /' <<<"$out"
    fails=$((fails + 1))
  fi
done
((fails == 0)) || { echo "FAIL: $fails of ${#blocks[@]} configs in the docs do not pass --check-config"; exit 1; }
echo "PASS: ${#blocks[@]} configs in the docs pass --check-config"
