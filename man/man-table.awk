# Renders a table the programs print (tab-separated) into a man page template.
#   awk -F'\t' -v kind=conf -f man-table.awk KEYS.tsv TEMPLATE
#     conf: section, key, values, default, help; @KEYS@ becomes every key,
#           grouped by section in the order of the sections' first keys.
#   awk -F'\t' -v kind=env -f man-table.awk ENV.tsv TEMPLATE
#     env: name, values, default, meaning, as kvtier-run --print-env prints
#          it; @ENV_USER@ becomes the variables before its "# for tests"
#          line, @ENV_TEST@ those after it.
#   awk -F'\t' -v kind=metrics -f man-table.awk METRICS.tsv TEMPLATE
#     metrics: name, type, help, as man/metrics-list prints them; @METRICS@
#              becomes every metric, in kvtierctl metrics' order.
function esc(s) {
        gsub(/\\/, "\\e", s)
        gsub(/-/, "\\-", s)
        if (s ~ /^[.']/) s = "\\&" s
        return s
}
function sentence(s) { return s ~ /[.]$/ ? s : s "." }
FNR == NR {
        if (kind == "metrics") {
                if (NF != 3) { print "man-table.awk: bad metrics line: " $0 > "/dev/stderr"; bad = 1; next }
                metrics = metrics ".TP\n\\fB" esc($1) "\\fR (" $2 ")\n" esc(sentence($3)) "\n"
                nmetrics++
                next
        }
        if (kind == "env") {
                if ($0 ~ /^# for tests/) { group = 2; next }
                if ($0 ~ /^#/) { group = 1; next }
                if (NF != 4) { print "man-table.awk: bad env line: " $0 > "/dev/stderr"; bad = 1; next }
                n[group]++
                row[group, n[group]] = ".TP\n\\fB" $1 "\\fR=\\fI" esc($2) "\\fR\n" esc(sentence($4)) \
                        "\n.br\nDefault: " esc($3) "."
        } else {
                if (NF != 5) { print "man-table.awk: bad conf line: " $0 > "/dev/stderr"; bad = 1; next }
                if (!($1 in keys)) order[++nsec] = $1
                keys[$1] = keys[$1] ".TP\n\\fB" $2 "\\fR = \\fI" esc($3) "\\fR\n" esc(sentence($5)) \
                        "\n.br\nDefault: " esc($4) ".\n"
                nkeys++
        }
        next
}
kind == "conf" && $0 == "@KEYS@" {
        for (i = 1; i <= nsec; i++) printf ".SS \"[%s]\"\n%s", order[i], keys[order[i]]
        done_keys = 1
        next
}
kind == "metrics" && $0 == "@METRICS@" {
        printf "%s", metrics
        done_metrics = 1
        next
}
kind == "env" && ($0 == "@ENV_USER@" || $0 == "@ENV_TEST@") {
        g = $0 == "@ENV_USER@" ? 1 : 2
        for (i = 1; i <= n[g]; i++) print row[g, i]
        done_env[g] = 1
        next
}
{ print }
END {
        if (bad) exit 1
        if (kind == "conf" && (!done_keys || !nkeys)) { print "man-table.awk: no @KEYS@ or no keys" > "/dev/stderr"; exit 1 }
        if (kind == "env" && (!done_env[1] || !n[1])) { print "man-table.awk: no @ENV_USER@ or no variables" > "/dev/stderr"; exit 1 }
        if (kind == "metrics" && (!done_metrics || !nmetrics)) { print "man-table.awk: no @METRICS@ or no metrics" > "/dev/stderr"; exit 1 }
}
