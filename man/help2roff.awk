# Renders the entries of a program's --help into .TP items for its man page.
#   PROGRAM --help | awk -v part=HEADER -f help2roff.awk
# An entry is a line indented by 2 to 6 spaces: what to type, then, after
# two spaces or more, its description; lines indented deeper continue it.
# part names the header line ("Commands:") whose entries are wanted; empty,
# the entries of the first block that has some.  Exits 1 if none is found.
function esc(s) {
        gsub(/\\/, "\\e", s)
        gsub(/-/, "\\-", s)
        if (s ~ /^[.']/) s = "\\&" s
        return s
}
function flush() { if (spec != "") { printf ".TP\n.B %s\n%s\n", esc(spec), esc(text); n++ } spec = ""; text = "" }
BEGIN { on = part == "" }
part != "" && $0 == part ":" { on = 1; next }
on && /^[A-Za-z].*:$/ { flush(); if (n) exit; next }
# The description column, from entries that leave two spaces before it:
# an entry whose words reach it with one space ("-s, --socket PATH daemon
# socket") is split there.
{ match($0, /^ */); indent = RLENGTH }
indent >= 2 && indent <= 6 && match(substr($0, indent + 1), /  +[^ ]/) && !col { col = indent + RSTART + RLENGTH - 1 }
on && indent >= 2 && indent <= 6 && /[^ ]/ {
        flush()
        line = $0
        sub(/^ +/, "", line)
        spec = line; text = ""; split_at_col = 0
        if (match(line, /  +/)) { spec = substr(line, 1, RSTART - 1); text = substr(line, RSTART + RLENGTH) }
        else if (col && length($0) >= col) {
                for (p = col - 1; p <= length($0) && substr($0, p, 1) != " "; p++)
                        ;
                if (p < length($0)) { spec = substr($0, indent + 1, p - indent - 1); text = substr($0, p + 1); split_at_col = 1 }
        }
        next
}
on && indent >= 7 && /[^ ]/ && spec != "" {
        line = $0; sub(/^ +/, "", line)
        # A description on the next line: the whole entry line was what to type.
        if (split_at_col) { spec = spec " " text; text = ""; split_at_col = 0 }
        text = text == "" ? line : text " " line; next }
on && /^$/ { flush(); if (n) exit }
END { flush(); if (!n) { print "help2roff.awk: no entries" (part != "" ? " under " part ":" : "") > "/dev/stderr"; exit 1 } }
