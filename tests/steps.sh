# Sourced by tests/install.sh and tests/packages.sh: count checks and print
# the closing line "NAME: N passed, M failed" that tests/run.sh reads.
# The sourcing script sets NAME first.
passed=0
failed=0

# ok MESSAGE: one check passed
ok() {
	echo "ok: $*"
	passed=$((passed + 1))
}

# fail MESSAGE: one check failed
fail() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}

# check MESSAGE COMMAND...: run COMMAND, ok if it exits 0, fail otherwise
check() {
	what=$1
	shift
	if "$@"; then ok "$what"; else fail "$what"; fi
}

# finish: print the closing line and exit 0 only if nothing failed
finish() {
	echo "$NAME: $passed passed, $failed failed"
	[ $failed -eq 0 ]
	exit
}
