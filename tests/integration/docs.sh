#!/bin/bash
# The man pages and the bash completion against what they document:
# kvtierd.conf(5) lists every key of daemon/conf.c's table (as `man
# kvtierd.conf` renders it), libkvtier(7) every variable kvtier-run
# --print-env prints, kvtierd(8) and kvtierctl(1) every option of their
# --help; groff finds nothing to warn of; the completion parses, offers the
# commands and options of kvtierctl --help, and set's keys and policies are
# the table's.
. "$(dirname "$0")/lib.sh"

MAN="$top_builddir/man"
: >"$TMP/empty.conf"
# render PAGE: the page as man shows it, plain text
render() { LC_ALL=C.UTF-8 groff -man -rLL=300n -rHY=0 -Tutf8 -P-cbou "$1" 2>/dev/null | sed 's/‐/-/g'; }
command -v groff >/dev/null || { echo "1..0 # SKIP groff not installed"; exit 0; }

for page in kvtierd.8 kvtierctl.1 kvtier-run.1 kvtier-sim.1 kvtierd.conf.5 libkvtier.7; do
        check "$page is built" [ -s "$MAN/$page" ]
        LC_ALL=C.UTF-8 groff -man -ww -z "$MAN/$page" >"$TMP/groff.txt" 2>&1
        check "groff -ww: no warning in $page" [ ! -s "$TMP/groff.txt" ]
        [ -s "$TMP/groff.txt" ] && diag "$(cat "$TMP/groff.txt")"
        check "no placeholder left in $page" bash -c "! grep -n '@[A-Za-z_]*@' '$MAN/$page'"
done

# Every {"section", "key", ...} entry of the table, read from the source.
sed -n 's/^ *{"\([a-zA-Z.]*\)", "\([a-z_]*\)", CONF_.*/\1 \2/p' "$top_srcdir/daemon/conf.c" | sort >"$TMP/table.txt"
check_gt "daemon/conf.c's table has keys" "$(wc -l <"$TMP/table.txt")" 20
render "$MAN/kvtierd.conf.5" | awk '
        /^KEYS$/ { on = 1; next }
        /^[A-Z]/ { on = 0 }
        on && /^   \[.*\]$/ { s = $1; gsub(/[][]/, "", s); next }
        on && /^       [a-z_]+ +=/ { print s, $1 }' | sort >"$TMP/man-keys.txt"
check "man kvtierd.conf lists every key of the table, in its section" diff -u "$TMP/table.txt" "$TMP/man-keys.txt"
"$KVTIERD" -c "$TMP/empty.conf" --print-config 2>/dev/null | sed -n 's/^\([a-z_]*\) = .*/\1/p' | sort -u >"$TMP/printed.txt"
awk '{ print $2 }' "$TMP/table.txt" | sort -u >"$TMP/table-names.txt"
check "every key kvtierd --print-config prints is in the table" \
        bash -c "[ -s '$TMP/printed.txt' ] && ! comm -23 '$TMP/printed.txt' '$TMP/table-names.txt' | grep ."

# libkvtier(7): the variables kvtier-run --print-env prints, as it prints them.
env KVTIER_LIB="$SHIM" ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" "$top_builddir/tools/kvtier-run" --print-env \
        >"$TMP/env.txt" 2>/dev/null
"$MAN/env-table" >"$TMP/env-table.txt"
check "man/env-table prints what kvtier-run --print-env prints" diff -u "$TMP/env.txt" "$TMP/env-table.txt"
grep -v '^#' "$TMP/env.txt" | cut -f1 | sort >"$TMP/env-names.txt"
render "$MAN/libkvtier.7" | sed -n 's/^       \(KVTIER_[A-Z_]*\)=.*/\1/p' | sort >"$TMP/man-env.txt"
check "libkvtier(7) lists every variable of kvtier-run --print-env" diff -u "$TMP/env-names.txt" "$TMP/man-env.txt"

# libkvtier(7): every entry point of shim/cuda-abi.h's hook lists.
"$MAN/hook-list" >"$TMP/hooks.txt"
check "man/hook-list prints the hooks (cudaMalloc, cuMemAlloc_v2, cuGetProcAddress_v2 among them)" \
        bash -c "grep -qx cudaMalloc '$TMP/hooks.txt' && grep -qx cuMemAlloc_v2 '$TMP/hooks.txt' && grep -qx cuGetProcAddress_v2 '$TMP/hooks.txt'"
render "$MAN/libkvtier.7" | awk '/^WHAT IS CAPTURED$/ { on = 1; next } /^[A-Z]/ { on = 0 } on' >"$TMP/captured.txt"
check "libkvtier(7) names every hooked entry point" \
        bash -c "while read -r h; do grep -qw -- \"\$h\" '$TMP/captured.txt' || { echo \"missing \$h\"; exit 1; }; done <'$TMP/hooks.txt'"

# kvtierd(8), kvtierctl(1), kvtier-sim(1): every long option of --help.
for prog in "$KVTIERD:kvtierd.8" "$KVTIERCTL:kvtierctl.1" "$top_builddir/kvtier-sim:kvtier-sim.1"; do
        bin=${prog%:*} page=${prog#*:}
        "$bin" --help | grep -o -- '--[a-z][a-z-]*' | sort -u >"$TMP/opts.txt"
        render "$MAN/$page" | grep -o -- '--[a-z][a-z-]*' | sort -u >"$TMP/man-opts.txt"
        check "$page names every option of ${bin##*/} --help" \
                bash -c "[ -s '$TMP/opts.txt' ] && ! comm -23 '$TMP/opts.txt' '$TMP/man-opts.txt' | grep ."
done
"$KVTIERCTL" --help | awk '/^Commands:/ { on = 1; next } /^[A-Z]/ { on = 0 } on && /^  [a-z]/ { print $1 }' | sort -u \
        >"$TMP/commands.txt"
render "$MAN/kvtierctl.1" | awk '/^COMMANDS$/ { on = 1; next } /^[A-Z]/ { on = 0 } on && /^       [a-z]/ { print $1 }' |
        sort -u >"$TMP/man-commands.txt"
check "kvtierctl(1) lists every command of kvtierctl --help" diff -u "$TMP/commands.txt" "$TMP/man-commands.txt"

# --version everywhere: the package's version, exit 0.
version=$("$KVTIERD" --version | awk '{ print $2 }')
for bin in "$KVTIERD" "$KVTIERCTL" "$top_builddir/kvtier-sim" "$top_builddir/tools/kvtier-run"; do
        check "${bin##*/} --version prints '${bin##*/} $version' and exits 0" \
                bash -c "[ \"\$('$bin' --version)\" = '${bin##*/} $version' ]"
done
check "the version is the package's" grep -q "^PACKAGE_VERSION = $version\$" "$top_builddir/Makefile"

# The bash completion.
COMPLETION="$top_srcdir/tools/bash-completion/kvtierctl"
check "the completion parses (bash -n)" bash -n "$COMPLETION"
# complete WORD...: what the completion offers for the last word, one a line
complete_words() {
        bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _kvtierctl; printf "%s\n" "${COMPREPLY[@]}"' \
                complete "$COMPLETION" "$KVTIERCTL" "$@" | sed '/^$/d' | sort -u
}
complete_words "" >"$TMP/c-commands.txt"
check "it offers the commands of kvtierctl --help" diff -u "$TMP/commands.txt" "$TMP/c-commands.txt"
check "it completes --so to --socket" [ "$(complete_words --so)" = --socket ]
check "it completes st to status" [ "$(complete_words st)" = status ]
: >"$TMP/other.sock"
check "-s completes a file name" [ "$(complete_words -s "$TMP/other.so")" = "$TMP/other.sock" ]
complete_words set "" | sed -n 's/^policy\.//p' | sort >"$TMP/c-policy-keys.txt"
awk '$1 == "policy" && $2 != "name" { print $2 }' "$TMP/table.txt" | sort >"$TMP/policy-keys.txt"
check "set policy.KEY offers the table's [policy] keys (name is set policy NAME)" \
        diff -u "$TMP/policy-keys.txt" "$TMP/c-policy-keys.txt"
complete_words set policy "" >"$TMP/c-policies.txt"
check_gt "set policy offers policies" "$(wc -l <"$TMP/c-policies.txt")" 1
takes_policy() { "$KVTIERD" -c "$TMP/empty.conf" -o "policy.name=$1" --print-config >/dev/null 2>&1; }
while read -r p; do
        check "policy $p is one kvtierd takes" takes_policy "$p"
done <"$TMP/c-policies.txt"
done_testing
