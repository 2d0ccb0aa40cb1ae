# Sourced by tests/run.sh, tests/integration/run.sh and tests/compat/*.sh:
# read the counts of passed and failed tests off a test program's output.
# Each function sets counts_passed and counts_failed (0 and 0 when the line
# it looks for is missing, and then returns 1).

# check_counts OUTPUT: the last line of a Check suite's report in OUTPUT,
# "NN%: Checks: N, Failures: F, Errors: E": N - F - E passed, F + E failed
check_counts() {
	counts_passed=0
	counts_failed=0
	counts_line=$(printf '%s\n' "$1" | grep -E '^[0-9]+%: Checks: [0-9]+' | tail -n 1)
	[ -n "$counts_line" ] || return 1
	set -- "$(echo "$counts_line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')" \
	    "$(echo "$counts_line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')" \
	    "$(echo "$counts_line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')"
	counts_passed=$(($1 - $2 - $3))
	counts_failed=$(($2 + $3))
}

# summary_counts NAME OUTPUT: the last line "NAME: N passed, M failed" in
# OUTPUT; counts_line is what follows "NAME: "
summary_counts() {
	counts_passed=0
	counts_failed=0
	counts_line=$(printf '%s\n' "$2" | grep -E "^$1: [0-9]+ passed, [0-9]+ failed\$" |
	    tail -n 1)
	[ -n "$counts_line" ] || return 1
	counts_line=${counts_line#"$1: "}
	counts_passed=$(echo "$counts_line" | sed -E 's/^([0-9]+) passed.*/\1/')
	counts_failed=$(echo "$counts_line" | sed -E 's/.* ([0-9]+) failed$/\1/')
}
