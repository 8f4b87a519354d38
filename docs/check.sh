#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the documentation:
#  1. no notes about how the work went: issue numbers, commit ids, "this stop", "last stop",
#     agents, the workplace, notes about the development machines. docs/benchmarks.md names
#     the commit each figure was measured at, so it alone may hold commit ids;
#  2. every relative markdown link points at a file or directory that exists, and an anchor
#     into a markdown file names one of its headings.
# Prints file:line: problem for each hit and exits 1 if there is any.
#
# usage: bash docs/check.sh   (from anywhere; paths are relative to the repository root)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# Files generated elsewhere (by `jumppod` itself): a link to one is accepted when it is absent.
generated=(docs/reference/cli.md)

user_docs=(README.md CHANGELOG.md CONTRIBUTING.md charts/jumppod/README.md policy/README.md
  host/README.md controlplane/README.md)
while IFS= read -r f; do user_docs+=("$f"); done < <(find docs -name '*.md' -type f | sort)
# Checked for (1) only: text that is not markdown.
plain_docs=(charts/jumppod/templates/NOTES.txt)
# The one file that names commits.
measured=docs/benchmarks.md

status=0
hit() { echo "$1"; status=1; }

# 1. Words and ids that do not belong in the documentation.
commit_id='(?<![0-9A-Za-z_:@/.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])'
patterns=(
  '(?i)\bissues? #?[0-9]'
  '(?i)\bthis stop\b'
  '(?i)\blast stop\b'
  '(?i)\bagents?\b'
  '(?i)\bworkplace\b'
  '(?i)cannot be built here'
  '(?i)installed once by hand'
  # a bare commit id: 7-40 hex digits, word-bounded, with at least one digit and one letter a-f
  "$commit_id"
  # dstack's pull request by number alone; allowed where the line links it or says pre-/post-
  '(?<![-/])#3891(?!\))'
)
for f in "${user_docs[@]}" "${plain_docs[@]}"; do
  [ -f "$f" ] || { hit "$f: listed but missing"; continue; }
  for p in "${patterns[@]}"; do
    if [ "$f" = "$measured" ] && [ "$p" = "$commit_id" ]; then continue; fi
    while IFS= read -r line; do
      n=${line%%:*}; text=${line#*:}
      if [[ $p == *'#3891'* ]] && grep -q 'github.com/dstackai/dstack/pull/3891' <<<"$text"; then continue; fi
      hit "$f:$n: $(grep -oP -- "$p" <<<"$text" | head -1): $(cut -c1-120 <<<"$text")"
    done < <(grep -nP -- "$p" "$f")
  done
done

# GitHub's anchors of a markdown file's headings: lower case, punctuation dropped, spaces to '-'.
slugs() {
  awk '/^[[:space:]]*(```|~~~)/ {fence = !fence; next} !fence && /^#+ / {sub(/^#+ +/, ""); print}' "$1" |
    tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
}

# 2. Relative links: [text](target) and [label]: target, outside fenced code blocks.
for f in "${user_docs[@]}"; do
  [ -f "$f" ] || continue
  dir=$(dirname "$f")
  awk '/^[[:space:]]*(```|~~~)/ {fence = !fence; next} !fence {print FNR "\t" $0}' "$f" |
  while IFS=$'\t' read -r n text; do
    { grep -oP '\]\(\K[^)[:space:]]+' <<<"$text"; grep -oP '^\s*\[[^]]+\]:\s*\K\S+' <<<"$text"; } |
    while IFS= read -r target; do
      case $target in http://*|https://*|mailto:*|\#*) continue ;; esac
      path=${target%%#*}
      anchor=; [[ $target == *'#'* ]] && anchor=${target#*#}
      [ -n "$path" ] || continue
      resolved=$(realpath -m --relative-to="$root" "$dir/$path")
      if [ ! -e "$resolved" ]; then
        for g in "${generated[@]}"; do [ "$resolved" = "$g" ] && continue 2; done
        echo "$f:$n: broken link: $target"
        continue
      fi
      # An anchor into a markdown file must name one of its headings (GitHub's slugs).
      if [ -n "$anchor" ] && [[ $resolved == *.md ]] && ! slugs "$resolved" | grep -qxF -- "$anchor"; then
        echo "$f:$n: no heading for anchor: $target"
      fi
    done
  done
done > /tmp/docs-check-links.$$
if [ -s /tmp/docs-check-links.$$ ]; then cat /tmp/docs-check-links.$$; status=1; fi
rm -f /tmp/docs-check-links.$$

if [ $status = 0 ]; then echo "docs/check.sh: ${#user_docs[@]} documents and ${#plain_docs[@]} other clean, their links resolve"; fi
exit $status
