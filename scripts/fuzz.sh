#!/usr/bin/env bash
# Runs every fuzz target of the module, one `-fuzz` run per target (Go fuzzes
# one target per run), each for FUZZTIME (a duration like 3s, or a count
# like 500x). Targets are found in the test files that build on this
# platform, so a new `func FuzzXxx(f *testing.F)` is picked up without
# editing anything here.
#
# Each package's fuzz-instrumented test binary is built once and run in the
# package directory (where testdata/fuzz/ lives) for each of its targets:
# building is the cost, not fuzzing. The generated corpus goes where
# `go test -fuzz` keeps it ($GOCACHE/fuzz/<import path>), never into the tree.
#
# A failing input fails the script after every target has run; its path in
# the tree and its contents are printed, so a CI log is enough to reproduce.
#
#   FUZZTIME=3s scripts/fuzz.sh              # every target
#   FUZZTIME=5m scripts/fuzz.sh ./tls        # the targets of some packages
#   FUZZ_MATCH=ClientHello scripts/fuzz.sh   # targets whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-60s}
# Minimizing a failing input is bounded too: the input itself is the finding.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-30s}
FUZZ_MATCH=${FUZZ_MATCH:-.}
# Per target: a hung input must end the run, not the CI budget.
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-15m}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)

root=$(pwd)
gocache=$($GO env GOCACHE)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

start=$SECONDS
ntargets=0
failed=()
unfuzzed=()
# One line per package: import path, directory, then the test files that
# build here (build constraints and _GOOS suffixes already applied).
while read -r ip dir files; do
	[ -n "$files" ] || continue
	targets=$(cd "$dir" && grep -hoE '^func Fuzz[A-Za-z0-9_]*\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\)' $files |
		sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' | grep -E -- "$FUZZ_MATCH" | sort -u || true)
	[ -n "$targets" ] || continue
	bin="$work/$(echo "$ip" | tr / _).test"
	t0=$SECONDS
	if ! $GO test -c -fuzz=. -o "$bin" "$ip" >"$work/build.log" 2>&1; then
		cat "$work/build.log"
		failed+=("$ip (build)")
		continue
	fi
	echo "== $ip: built in $((SECONDS - t0))s"
	for t in $targets; do
		ntargets=$((ntargets + 1))
		log="$work/$t.log"
		t0=$SECONDS
		for try in 1 2; do
			set +e
			(cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^$t\$" \
				-test.fuzztime="$FUZZTIME" -test.fuzzminimizetime="$FUZZMINIMIZETIME" \
				-test.fuzzcachedir="$gocache/fuzz/$ip" -test.timeout="$FUZZ_TIMEOUT" \
				-test.paniconexit0) >"$log" 2>&1
			rc=$?
			set -e
			# The fuzzing engine itself sometimes ends a run that found
			# nothing with "context deadline exceeded" when its time is up
			# mid-exchange with a worker: no input failed. Once more.
			if [ $rc -ne 0 ] && [ $try -eq 1 ] && ! grep -q 'Failing input written' "$log" &&
				grep -qx '[[:space:]]*context deadline exceeded' "$log"; then
				echo "   again $t: the engine stopped with 'context deadline exceeded' and no failing input"
				continue
			fi
			break
		done
		last=$(grep -E '^fuzz: elapsed' "$log" | tail -1 | sed -E 's/^fuzz: elapsed: [^,]*, //; s/ \([0-9]+\/sec\)//' || true)
		if [ $rc -eq 0 ]; then
			# A budget spent before the baseline coverage was gathered (a
			# slow TestMain in every worker, say) fuzzed nothing: say so.
			if ! grep -q 'now fuzzing' "$log"; then
				echo "   WARN $t ($((SECONDS - t0))s): never got past the seed corpus ($last); give it a longer FUZZTIME"
				unfuzzed+=("$ip $t")
				continue
			fi
			echo "   ok   $t ($((SECONDS - t0))s; $last)"
			continue
		fi
		echo "   FAIL $t ($((SECONDS - t0))s)"
		cat "$log"
		failed+=("$ip $t")
		# "Failing input written to testdata/fuzz/FuzzX/<hash>", relative to
		# the package directory.
		for in in $(sed -nE 's/.*Failing input written to (testdata\/fuzz\/[^ ]+).*/\1/p' "$log"); do
			rel=${dir#"$root"/}/$in
			echo "   reproducer: $rel"
			echo "   rerun:      (cd ${dir#"$root"/} && $GO test -run='^$t/${in##*/}\$' .)"
			echo "   --- $rel"
			sed 's/^/   | /' "$dir/$in"
		done
	done
done < <($GO list -f '{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}' "${pkgs[@]}")

echo "fuzz: $ntargets targets, ${#failed[@]} failed, ${#unfuzzed[@]} not fuzzed past their seeds, $((SECONDS - start))s (FUZZTIME=$FUZZTIME)"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz: FAIL %s\n' "${failed[@]}"
	exit 1
fi
[ "$ntargets" -gt 0 ] || { echo "fuzz: no fuzz target found"; exit 1; }
