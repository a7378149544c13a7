# SPDX-License-Identifier: GPL-2.0
#
# Sourced by bench.sh (and test_selftest.py's BenchRowsTest): perftest's result rows into the
# node's CSV ($csv). Uses lib.sh's note and fail.

# row SCOPE DEV TOOL SIZE REP METRIC VALUE: one result.
row() {
	echo "$1,$2,$3,$4,$5,$6,$7" >> "$csv"
}

# is_zero NUMBER: whether a perftest figure ("0", "0.00") is zero.
is_zero() {
	[[ $1 =~ ^0+(\.0*)?$ ]]
}

# rows_of LOG SCOPE DEV TOOL LABEL REP: the result rows of a perftest client log, under
# LABEL: bandwidth tools print "bytes iterations peak avg msgrate" per size, latency tools
# "bytes iterations min max typical avg stdev p99 p99.9".
rows_of() {
	local log=$1 scope=$2 dev=$3 tool=$4 label=$5 rep=$6 n=0 a line
	while read -r line; do
		# perftest's "Correlation coefficient r^2 below 0.9" (its CPU clock estimate failed)
		# can land inside a row; a row measured with the failed estimate reads 0 in every
		# rate (bandwidth and message rate alike): such rows are left out (noted), so a
		# figure may have fewer repetitions than asked for. A bandwidth that perftest's two
		# decimals round to 0.00 beside a message rate that is not 0 is a real figure (rxe
		# at 64 B under TCG: 0.000047 Mpps, 0.003 MiB/s) and is kept.
		# The latency tools' stdev column reads "-nan" when the samples vary a lot (rxe under
		# TCG: 5 ms to 165 ms in 20 exchanges); it is not a figure we keep, so only the
		# columns kept must be numbers.
		if ! [[ $line =~ ^[0-9]+( +([0-9]+(\.[0-9]+)?|-?nan))+$ ]]; then
			note "bench: $scope $dev $label rep $rep: row left out: $line"
			continue
		fi
		read -r -a a <<< "$line"
		case $tool in
		*_bw)
			[ "${#a[@]}" -ge 5 ] && [[ ${a[3]}/${a[4]} != *nan* ]] || continue
			if is_zero "${a[3]}" && is_zero "${a[4]}"; then
				note "bench: $scope $dev $label rep $rep: row left out (no clock): $line"
				continue
			fi
			row "$scope" "$dev" "$label" "${a[0]}" "$rep" MiBps "${a[3]}"
			row "$scope" "$dev" "$label" "${a[0]}" "$rep" Mpps "${a[4]}"
			;;
		*_lat)
			[ "${#a[@]}" -ge 9 ] && [[ ${a[4]}/${a[7]} != *nan* ]] || continue
			if is_zero "${a[4]}"; then
				note "bench: $scope $dev $label rep $rep: row left out (no clock): $line"
				continue
			fi
			row "$scope" "$dev" "$label" "${a[0]}" "$rep" median_us "${a[4]}"
			row "$scope" "$dev" "$label" "${a[0]}" "$rep" p99_us "${a[7]}"
			;;
		esac
		n=$((n + 1))
	done < <(grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$log" | sed -E 's/^ +//; s/[ \t]+/ /g; s/ $//')
	[ "$n" -gt 0 ] || { cat "$log" >&2; fail "$scope $dev $tool: no result rows"; }
}
