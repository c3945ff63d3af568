#!/usr/bin/env bash
# docs_links.sh SOURCE_DIR: every relative link and #anchor in README.md and docs/*.md
# resolves (docs_links.py). First the checker is shown a made-up tree with one good and
# three broken links, so a checker that finds nothing cannot pass.
set -u
here=$(cd "$(dirname "$0")" && pwd) src=$1
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs"
cat > "$tmp/README.md" <<'EOT'
# Title
See [a](docs/a.md#the-key-table-modelx), [b](docs/a.md#nowhere), [c](docs/none.md),
[d](#title) and [e](#not-here); `[code](docs/none.md)` is code.
EOT
printf '# A\n\n## The key table (`model.x`)\n' > "$tmp/docs/a.md"
out=$(python3 "$here/docs_links.py" "$tmp") && { echo "FAIL: the checker passed broken links"; exit 1; }
for want in 'README.md:2: docs/a.md#nowhere' 'README.md:2: docs/none.md' 'README.md:3: #not-here'; do
  grep -qF "broken link: $want" <<<"$out" || { echo "$out"; echo "FAIL: not found: $want"; exit 1; }
done
[[ $(grep -c '^broken link' <<<"$out") == 3 ]] || { echo "$out"; echo "FAIL: good links reported"; exit 1; }
python3 "$here/docs_links.py" "$src"
