# Shared by the tools/bench-* scripts (source it after cd to the workspace root): summary figures
# for printed tables. Functions only.

# The median of the numbers on stdin, one per line ("" when there are none).
median() { sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "")}'; }

# a as a percentage of b ("-" when either is missing or b is 0).
percent() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.1f%%", 100 * a / b }'; }

# a / b as "1.23x" ("-" when either is missing or b is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a / b }'; }
