#!/usr/bin/env python3
"""docs_links.py SOURCE_DIR: every relative link in README.md and docs/*.md resolves.

A link [text](target) or <a href="target"> outside code (fenced blocks and `spans`) whose
target is not a URL (http:, https:, mailto:) must name a file or folder that exists,
relative to the file that holds the link; its #anchor, if any, must be the slug of a
heading of the target Markdown file (or of the same file for a bare #anchor), made the
way GitHub makes them: the heading's rendered text lower-cased, every character that is
not a letter, digit, space, '-' or '_' removed, spaces turned into '-', and a repeated
slug given -1, -2, ... in order. Prints every broken link as file:line and exits 1."""
import html
import os
import re
import sys

LINK = re.compile(r'(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)'
                  r'|<a\s+href="([^"]+)"')
IMAGE = re.compile(r'!\[[^\]]*\]\(\s*<?([^)\s>]+)>?\s*\)')


def strip_code(line):
    return re.sub(r'(`+)(.+?)\1', '', line)


def lines_outside_code(text):
    fence = None
    for no, line in enumerate(text.split('\n'), 1):
        m = re.match(r'^\s{0,3}(`{3,}|~{3,})(.*)$', line)
        if m and not (m.group(1)[0] == '`' and '`' in m.group(2)):  # CommonMark's rule
            if fence is None:
                fence = m.group(1)
            elif m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if fence is None and not line.startswith('    '):
            yield no, line


def slug(heading):
    t = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # links: their text
    t = re.sub(r'<[^>]+>', '', t)                          # inline HTML tags
    t = t.replace('`', '').replace('*', '')
    t = html.unescape(t).strip().lower()
    t = ''.join(c for c in t if c.isalnum() or c in ' -_')
    return t.replace(' ', '-')


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        text = open(path, encoding='utf-8').read()
        for _, line in lines_outside_code(text):
            m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
            if m:
                s = slug(m.group(2))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else '%s-%d' % (s, n))
        for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', text):
            out.add(m.group(1))
        cache[path] = out
    return cache[path]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else '.')
    docs = os.path.join(root, 'docs')
    files = [os.path.join(root, 'README.md')]
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith('.md'))
    bad, n = [], 0
    for f in files:
        for no, line in lines_outside_code(open(f, encoding='utf-8').read()):
            plain = strip_code(line)
            targets = [a or b for a, b in LINK.findall(plain)] + IMAGE.findall(plain)
            for t in targets:
                if re.match(r'^[a-z][a-z0-9+.-]*:', t, re.I):
                    continue  # a URL
                n += 1
                path, _, anchor = t.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                where = '%s:%d: %s' % (os.path.relpath(f, root), no, t)
                if not os.path.exists(dest):
                    bad.append(where + ': no such file')
                elif anchor:
                    if not dest.endswith('.md'):
                        bad.append(where + ': an anchor into a file that is not Markdown')
                    elif anchor not in anchors(dest):
                        bad.append(where + ': no heading with that anchor in ' +
                                   os.path.relpath(dest, root))
    for b in bad:
        print('broken link: ' + b)
    if n == 0:
        print('FAIL: no relative link found at all (is the parser broken?)')
        return 1
    print('%s: %d relative links in %d files, %d broken' %
          ('FAIL' if bad else 'PASS', n, len(files), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
