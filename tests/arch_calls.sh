#!/bin/sh
# tests/arch_calls.sh NM LIBRARY [CIRCLE ...] — no circles between the files
# of a module: reads the library's object files with NM (-A -P -g), draws an
# arrow A -> B where A's object uses a global symbol (a call, or data) that
# B's defines, and prints the graph one file a line ("A -> B C ...", each
# file after every file that calls it, so the list reads top-down). Files
# that reach each other through these arrows form a circle: each is printed
# with the arrows and names that tie it, and the check fails (exit 1),
# unless the circle is one of the CIRCLEs given, each as its files joined by
# commas (a known circle that is still to be opened); a CIRCLE given that is
# no longer a circle fails too, so the list cannot outlive the circles.
# Exits 1 as well when the library cannot be read. docs/architecture.md
# ("Layers inside a module") says which circles are known.
set -u
nm=${1:?usage: arch_calls.sh NM LIBRARY [CIRCLE ...]}
lib=${2:?usage: arch_calls.sh NM LIBRARY [CIRCLE ...]}
shift 2
[ -r "$lib" ] || { echo "arch_calls: cannot read $lib"; exit 1; }
syms=$("$nm" -A -P -g "$lib") || { echo "arch_calls: $nm -A -P -g $lib failed"; exit 1; }
[ -n "$syms" ] || { echo "arch_calls: no symbols in $lib"; exit 1; }

printf '%s\n' "$syms" | awk -v known="$*" -v lib="$lib" '
    # "LIB[member.c.o]: name TYPE value size"
    {
        m = $1; sub(/^.*\[/, "", m); sub(/\]:$/, "", m); sub(/\.o$/, "", m)
        files[m] = 1
        if ($3 == "U") { n_use++; use_f[n_use] = m; use_s[n_use] = $2 }
        else if ($3 != "") def[$2] = m
    }
    END {
        for (i = 1; i <= n_use; i++) {
            d = def[use_s[i]]
            if (d == "" || d == use_f[i]) continue
            if (!((use_f[i], d) in edge)) { edge[use_f[i], d] = 1; why[use_f[i], d] = use_s[i] }
            else if (index(" " why[use_f[i], d] " ", " " use_s[i] " ") == 0)
                why[use_f[i], d] = why[use_f[i], d] " " use_s[i]
        }
        n = 0
        for (f in files) name[++n] = f
        # sort the names (insertion sort: a few dozen files)
        for (i = 2; i <= n; i++) {
            v = name[i]
            for (j = i - 1; j >= 1 && name[j] > v; j--) name[j + 1] = name[j]
            name[j + 1] = v
        }
        # reach[a, b]: b is reached from a (transitive closure)
        for (i = 1; i <= n; i++) for (j = 1; j <= n; j++)
            if ((name[i], name[j]) in edge) reach[name[i], name[j]] = 1
        for (k = 1; k <= n; k++) for (i = 1; i <= n; i++)
            if ((name[i], name[k]) in reach)
                for (j = 1; j <= n; j++)
                    if ((name[k], name[j]) in reach) reach[name[i], name[j]] = 1
        # the graph, top-down, floor by floor: a file once every file
        # reaching it (outside its own circle) is printed
        left = n
        while (left > 0) {
            took = 0
            for (i = 1; i <= n; i++) {
                a = name[i]
                if (a in shown) continue
                ok = 1
                for (j = 1; j <= n && ok; j++) {
                    b = name[j]
                    if (b != a && !(b in shown) && ((b, a) in reach) && !((a, b) in reach))
                        ok = 0
                }
                if (!ok) continue
                line = a " ->"
                for (j = 1; j <= n; j++)
                    if ((a, name[j]) in edge) line = line " " name[j]
                print line
                now[a] = 1; took = 1; left--
            }
            if (!took) break
            for (a in now) shown[a] = 1
            delete now
        }
        # circles: the files that reach each other
        split(known, kw, " ")
        for (i in kw) want[kw[i]] = 1
        bad = 0
        for (i = 1; i <= n; i++) {
            a = name[i]
            if (a in placed || !((a, a) in reach)) continue
            c = a; placed[a] = 1
            for (j = i + 1; j <= n; j++)
                if (((a, name[j]) in reach) && ((name[j], a) in reach)) {
                    c = c "," name[j]; placed[name[j]] = 1
                }
            k = split(c, mem, ",")
            if (c in want) {
                seen[c] = 1
                print "arch_calls: known circle " c " (to be opened)"
                continue
            }
            bad = 1
            print "arch_calls: circle between " c ":"
            for (x = 1; x <= k; x++) for (y = 1; y <= k; y++)
                if ((mem[x], mem[y]) in edge)
                    print "  " mem[x] " -> " mem[y] ": " why[mem[x], mem[y]]
        }
        for (c in want) if (!(c in seen)) {
            bad = 1
            print "arch_calls: " c " was given as a known circle and is none (any more): drop it"
        }
        if (!bad) print "arch_calls: " lib ": no circles between its files but those known"
        exit bad
    }'
