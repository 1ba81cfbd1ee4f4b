#!/bin/sh
# tests/arch_includes.sh SRC — every #include "M/..." in a module folder of
# SRC against the arrow table of SRC/docs/architecture.md ("Modules and the
# arrows allowed between them"): a module may include its own headers and
# those of the modules its row's "may include" names ("—": none;
# "everything"; "(and what they include)": also, transitively, what those
# may include). Prints each forbidden include as FILE:LINE: ... and exits 1;
# exits 1 as well when the table cannot be read. The build enforces the same
# arrows through include paths (cmake/NaModules.cmake); this check reads the
# documented table itself, so the table and the code cannot drift apart.
set -u
src=${1:?usage: arch_includes.sh SRC}
doc=$src/docs/architecture.md
[ -r "$doc" ] || { echo "arch_includes: cannot read $doc"; exit 1; }

# "folder<TAB>may include" for each row of the table
rows=$(awk -F'|' '
    /^## Modules and the arrows/ { on = 1; next }
    on && /^## / { on = 0 }
    on && /^\| `[a-z-]+\/` \|/ {
        f = $2; gsub(/[ `\/]/, "", f)
        a = $5; gsub(/^ +| +$/, "", a)
        print f "\t" a
    }' "$doc")
[ -n "$rows" ] || { echo "arch_includes: no module table in $doc"; exit 1; }
modules=$(printf '%s\n' "$rows" | cut -f1 | tr '\n' ' ')

# allowed FOLDER: the modules FOLDER may include (itself included)
allowed() {
    printf '%s\n' "$rows" | awk -F'\t' -v want="$1" -v mods="$modules" '
        { row[$1] = $2 }
        function direct(m,   a) {
            a = row[m]
            if (a ~ /everything/) { a = mods; gsub(/ +/, "\n", a); return a }
            sub(/\(.*\)/, "", a); gsub(/[ —-]*$/, "", a); gsub(/ /, "", a)
            gsub(/,/, "\n", a)
            return a
        }
        END {
            ok[want] = 1; todo[want] = 1; n = 1
            while (n > 0) {
                n = 0
                for (m in todo) {
                    delete todo[m]
                    k = split(direct(m), d, "\n")
                    trans = (m == want) || (row[want] ~ /and what they include/)
                    for (i = 1; i <= k; i++)
                        if (d[i] != "" && !(d[i] in ok)) {
                            ok[d[i]] = 1
                            if (trans) { todo[d[i]] = 1; n++ }
                        }
                }
            }
            for (m in ok) print m
        }'
}

bad=0
for f in $modules; do
    [ -d "$src/$f" ] || { echo "arch_includes: table names $f/, which is not in the tree"; bad=1; continue; }
    ok=$(allowed "$f" | tr '\n' ' ')
    # FILE:LINE:#include "M/..."
    out=$(cd "$src" && grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*/' \
              --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' "$f" |
          while IFS= read -r line; do
              path=${line#*\"}; path=${path%%\"*}
              top=${path%%/*}
              case " $modules " in *" $top "*) ;; *)
                  case "$top" in ..|.) echo "$line: relative include leaves the module" ;; esac
                  continue ;;
              esac
              case " $ok " in *" $top "*) ;; *)
                  echo "$line: $f/ may not include $top/ (docs/architecture.md)" ;;
              esac
          done)
    if [ -n "$out" ]; then
        printf '%s\n' "$out"
        bad=1
    fi
    echo "$f/ may include: $ok"
done
[ $bad -eq 0 ] && echo "arch_includes: every #include follows the arrows"
exit $bad
