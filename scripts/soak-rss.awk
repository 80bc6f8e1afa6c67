# soak-rss.awk: the memory summary of a soak (scripts/soak.sh) from its
# rss.log, lines "unix-ms name kB [pid]" (name "load": the load average in
# hundredths, no pid). With -v until=UNIX-MS (soak.sh passes the moment
# the load ended and the read-back began) the summary is of the load alone,
# and a last column gives each process's most during the read-back, a
# different load (every file read once through the gateway).
#
# First a table: each process's RSS in MiB at the first sample, at a
# quarter, a half and three quarters of the run, at the last sample, and
# its most. Then one line per process on whether it is level: its RSS at a
# third of the run and at the end, and its slope in MiB/min over the last
# two thirds (by least squares). A data server killed and restarted in
# that span starts again from nothing, so its slope is fitted within each
# life of the process (each pid against its own mean), which measures
# growth while it runs and not the drop at a restart; and the first 3
# minutes of a life are left out, since a restarted server warms up (it
# takes writes again once meta gives it new volumes). "level" means the
# fitted rise over the two thirds is under 5% of the RSS at a third, or
# under 16 MiB; else "RISING" (a cache still filling, or a leak: see the
# heap profiles).
#
# -v what=NAME names what the samples are (default RSS): soak.sh runs it
# again on heap.log, the live heap from each heap profile, which rises
# only with what a process keeps (a cache filling, or a leak), not with
# the garbage between collections that RSS also holds.
BEGIN { if (what == "") what = "RSS" }
until != "" && $1 + 0 > until + 0 {
	if ($3 + 0 > after[$2]) after[$2] = $3 + 0
	next
}
{
	n = $2
	if (!(n in cnt)) names[++nn] = n
	c = ++cnt[n]
	t[n, c] = $1; v[n, c] = $3; p[n, c] = $4
	if (!((n, $4) in born)) born[n, $4] = $1
	if (first == "" || $1 < first) first = $1
	if ($1 > last) last = $1
}
function at(n, frac,   i, tt) { # value of n's first sample at or after frac of the run
	tt = first + (last - first) * frac
	for (i = 1; i <= cnt[n]; i++) if (t[n, i] + 0 >= tt) return v[n, i]
	return v[n, cnt[n]]
}
END {
	for (i = 1; i <= nn; i++) sorted[i] = names[i]
	for (i = 1; i <= nn; i++) for (j = i + 1; j <= nn; j++) if (sorted[j] < sorted[i]) { x = sorted[i]; sorted[i] = sorted[j]; sorted[j] = x }
	printf "== %s in MiB%s%s\n  %-8s %7s %7s %7s %7s %7s %7s%s\n", what, ("load" in cnt) ? " (load: load average)" : "", until != "" ? ", of the load; read-back: the most while every write was read back" : "",
		"name", "first", "1/4", "1/2", "3/4", "last", "max", until != "" ? "  read-back" : ""
	for (k = 1; k <= nn; k++) {
		n = sorted[k]; d = n == "load" ? 100 : 1024; m = 0
		for (i = 1; i <= cnt[n]; i++) if (v[n, i] + 0 > m) m = v[n, i] + 0
		f = n == "load" ? "  %-8s %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f" : "  %-8s %7.0f %7.0f %7.0f %7.0f %7.0f %7.0f"
		printf f, n, v[n, 1] / d, at(n, 0.25) / d, at(n, 0.5) / d, at(n, 0.75) / d, v[n, cnt[n]] / d, m / d
		if (until != "") printf n == "load" ? "  %8.1f" : "  %8.0f", after[n] / d
		printf "\n"
	}
	cut = first + (last - first) / 3
	warm = 180000 # ms of a restarted life left out
	span = (last - cut) / 60000 # minutes
	printf "== %s over the last two thirds (%.0f min): MiB at 1/3 -> end, slope (level: rise under 5%% or 16 MiB)\n", what, span
	for (k = 1; k <= nn; k++) {
		n = sorted[k]
		if (n == "load") continue
		# Means per life (pid) over the window, then the pooled slope.
		delete sx; delete sy; delete sn
		lives = 0
		for (i = 1; i <= cnt[n]; i++) {
			if (t[n, i] + 0 < cut || t[n, i] - born[n, p[n, i]] < warm && born[n, p[n, i]] > first + 60000) continue
			l = p[n, i]
			if (!(l in sn)) lives++
			sn[l]++; sx[l] += (t[n, i] - cut) / 60000; sy[l] += v[n, i] / 1024
		}
		sxx = 0; sxy = 0
		for (i = 1; i <= cnt[n]; i++) {
			if (t[n, i] + 0 < cut || t[n, i] - born[n, p[n, i]] < warm && born[n, p[n, i]] > first + 60000) continue
			l = p[n, i]; x = (t[n, i] - cut) / 60000 - sx[l] / sn[l]; y = v[n, i] / 1024 - sy[l] / sn[l]
			sxx += x * x; sxy += x * y
		}
		if (sxx == 0) { printf "  %-8s too few samples\n", n; continue }
		slope = sxy / sxx
		from = at(n, 1 / 3) / 1024; to = v[n, cnt[n]] / 1024
		rise = slope * span
		verdict = (rise < 16 || rise < 0.05 * from) ? "level" : "RISING"
		printf "  %-8s %6.0f -> %6.0f MiB  %+7.2f MiB/min  (%+.0f MiB fitted)  %s%s\n", n, from, to, slope, rise, verdict,
			(lives > 1 ? sprintf("  [%d lives, fitted within each past its first 3 min]", lives) : "")
	}
}
