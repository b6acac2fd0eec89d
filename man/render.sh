#!/bin/sh
# Writes TEMPLATE to stdout with every line that is exactly MARKER replaced
# by FILE's contents, for each MARKER=FILE given; fails if a marker is not
# in TEMPLATE or a FILE is empty.
#   man/render.sh TEMPLATE MARKER=FILE...
set -eu
template=$1; shift
for arg in "$@"; do
        marker=${arg%%=*} file=${arg#*=}
        [ -s "$file" ] || { echo "render.sh: $file is empty" >&2; exit 1; }
        grep -qx "$marker" "$template" || { echo "render.sh: no $marker in $template" >&2; exit 1; }
done
awk 'BEGIN { for (i = 1; i < ARGC - 1; i++) { split(ARGV[i], kv, "="); m[kv[1]] = substr(ARGV[i], length(kv[1]) + 2); ARGV[i] = "" } }
     $0 in m { f = m[$0]; while ((getline l < f) > 0) print l; close(f); next }
     { print }' "$@" "$template"
