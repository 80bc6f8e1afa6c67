#!/usr/bin/env bash
# soak.sh DURATION: a mixed load against a 1 meta + 4 data server cluster
# (plus a gateway and a mount) while a data server is killed with -9 and
# restarted every KILL_EVERY seconds (in turn among the first KILL_SERVERS,
# default 3: chunk4 lives through the whole run, so that its memory is
# fitted over the last two thirds of the load like the gateway's and
# meta's, not over a few minutes of one short life); then every
# acknowledged write is read back. It reports the load, the errors
# (inside and outside the kill windows) and the memory (RSS) of every
# process over time, and exits non-zero if a write was lost or wrong or
# an error fell outside a window.
#
# The load (scripts/soak): small PUTs with GETs, large PUTs, appends,
# creates and reads through a FUSE mount (skipped without FUSE), S3
# multipart uploads. A kill window runs from the kill to GRACE seconds
# after the restart. Knobs: KILL_EVERY (120), DOWN (5: seconds a server
# stays dead), GRACE (30), BASE_PORT (19400), OUT (a new directory), KEEP
# (keep the store's files), PPROF (serve pprof on meta's, the gateway's
# and the mount's admin ports, BASE_PORT+3, +4 and +5, and the data
# servers', +6 to +9, and save their heap profiles in OUT/heap every
# PPROF seconds; the live heap each shows, as
# of the process's last collection, goes to OUT/heap.log and gets a
# summary of its own: RSS rises with garbage too, the live heap only with
# what is kept).
# Cache sizes (empty: the product's defaults): META_BLOCK_CACHE (meta
# --block-cache-size, 256MiB), META_READ_CACHE (meta --read-cache-size,
# 64MiB), META_MEMTABLE (meta --memtable-size, 64MiB: Pebble doubles its
# write buffer from 256 KiB up to it, flush by flush), HOT_CACHE (gateway
# --hot-cache-size, 256MiB), GW_META_CACHE (gateway --meta-cache-size,
# 64MiB: the inodes and extent lists of files it wrote or resolved),
# MOUNT_CACHE (mount --cache-size, 512MiB), GC_HEADROOM (every process's
# --gc-headroom, 256MiB and the mount's 128MiB: resident memory settles at
# the live heap plus about that much, which a 30-minute run at the
# default may not yet reach). Small ones fill in the first
# minutes, so that a 30-minute run shows whether memory is level once they
# are full.
# Everything it starts it stops by PID.
set -euo pipefail
DURATION=${1:?usage: soak.sh DURATION (e.g. 30m)}
KILL_EVERY=${KILL_EVERY:-120}
KILL_SERVERS=${KILL_SERVERS:-3}
case $KILL_SERVERS in
[1-4]) ;;
*) echo "soak: KILL_SERVERS is 1 to 4 (the data servers killed in turn)" >&2; exit 2 ;;
esac
DOWN=${DOWN:-5}
GRACE=${GRACE:-30}
BASE_PORT=${BASE_PORT:-19400}
# A restarted data server binds its port again; inside the kernel's range
# of ephemeral ports an outgoing connection may hold it by then (a run at
# 49100 lost chunk2 that way: "bind: address already in use").
read -r EPH_LO EPH_HI </proc/sys/net/ipv4/ip_local_port_range || EPH_LO=
if [ -n "$EPH_LO" ] && [ $((BASE_PORT + 20)) -ge "$EPH_LO" ] && [ "$BASE_PORT" -le "$EPH_HI" ]; then
	echo "soak: BASE_PORT $BASE_PORT is within the ephemeral ports $EPH_LO-$EPH_HI; choose one below $((EPH_LO - 20))" >&2
	exit 2
fi

cd "$(dirname "$0")/.."
make build >/dev/null
go build -o bin/soak ./scripts/soak
CAIRN=$PWD/bin/cairn
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/cairn-soak.XXXXXX")}
mkdir -p "$OUT"
export CAIRN_ROOT_USER=soak CAIRN_ROOT_PASSWORD=soak-password-123
export CAIRN_ENDPOINT=http://127.0.0.1:$BASE_PORT
META=127.0.0.1:$((BASE_PORT + 1))
S3=127.0.0.1:$((BASE_PORT + 2))
declare -A PID # name -> pid
MNT=$OUT/mnt
BG=()

stop_all() {
	[ -z "${LOAD:-}" ] || kill "$LOAD" 2>/dev/null || true
	for pid in "${BG[@]}"; do kill "$pid" 2>/dev/null || true; done
	mountpoint -q "$MNT" 2>/dev/null && { fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true; }
	for name in "${!PID[@]}"; do kill "${PID[$name]}" 2>/dev/null || true; done
	for name in "${!PID[@]}"; do wait "${PID[$name]}" 2>/dev/null || true; done
}
# The logs stay in OUT; the store's files go (KEEP=1 keeps them, to look
# into a lost write).
trap 'stop_all; [ -n "${KEEP:-}" ] || rm -rf "$OUT"/chunk?/ "$OUT/meta/" "$OUT/gateway/"' EXIT
# A soak stopped early (^C, kill PID) stops what it started too: exit runs
# the EXIT trap, which a signal's default action does not.
trap 'exit 130' INT TERM

ms() { date +%s%3N; }

# pids: the processes to sample, rewritten whenever one (re)starts; by a
# rename, so that the sampler never reads half a file (a torn "unt PID"
# line once showed up as a process of its own).
save_pids() {
	for name in "${!PID[@]}"; do echo "$name ${PID[$name]}"; done >"$OUT/pids.new"
	mv "$OUT/pids.new" "$OUT/pids"
}

start_chunk() { # $1 = 1..4
	local admin=(--admin off)
	[ -z "${PPROF:-}" ] || admin=(--admin 127.0.0.1:$((BASE_PORT + 5 + $1)) --pprof)
	"$CAIRN" chunk --data "$OUT/chunk$1" --listen 127.0.0.1:$((BASE_PORT + 10 + $1)) --meta "$META" \
		"${admin[@]}" "${GC[@]}" --join "$JOIN" >>"$OUT/chunk$1.log" 2>&1 &
	PID[chunk$1]=$!
	save_pids
}

alive() { "$CAIRN" admin status --meta "$META" 2>/dev/null | grep -c ' alive ' || true; }

wait_alive() { # $1 = how many
	for _ in $(seq 300); do
		[ "$(alive)" -ge "$1" ] && return 0
		sleep 0.2
	done
	echo "soak: only $(alive) data servers alive" >&2
	return 1
}

# A flag only when its variable is set, so the defaults stay the product's.
sizearg() { [ -z "$2" ] || echo "$1=$2"; }
META_CACHES=($(sizearg --block-cache-size "${META_BLOCK_CACHE:-}") $(sizearg --read-cache-size "${META_READ_CACHE:-}")
	$(sizearg --memtable-size "${META_MEMTABLE:-}"))
GW_CACHES=($(sizearg --hot-cache-size "${HOT_CACHE:-}") $(sizearg --meta-cache-size "${GW_META_CACHE:-}"))
MOUNT_CACHES=($(sizearg --cache-size "${MOUNT_CACHE:-}") $(sizearg --gc-headroom "${GC_HEADROOM:-}"))
GC=($(sizearg --gc-headroom "${GC_HEADROOM:-}"))

META_ADMIN=(--admin off)
GW_ADMIN=(--admin off)
MOUNT_ADMIN=()
if [ -n "${PPROF:-}" ]; then
	META_ADMIN=(--admin 127.0.0.1:$((BASE_PORT + 3)) --pprof)
	GW_ADMIN=(--admin 127.0.0.1:$((BASE_PORT + 4)) --pprof)
	MOUNT_ADMIN=(--admin 127.0.0.1:$((BASE_PORT + 5)) --pprof)
fi
"$CAIRN" meta --data "$OUT/meta" --listen "$META" "${META_ADMIN[@]}" "${META_CACHES[@]}" "${GC[@]}" --dead-after 5s >"$OUT/meta.log" 2>&1 &
PID[meta]=$!
# Servers join with a token (the cluster CA is meta's; see README).
export CAIRN_CA=$OUT/meta/ca.pem
JOIN=
for _ in $(seq 100); do
	JOIN=$("$CAIRN" admin join-token --meta "$META" --role data --uses 100 --ttl 24h 2>/dev/null) && break
	sleep 0.2
done
[ -n "$JOIN" ] || { echo "soak: meta gave no join token; see $OUT/meta.log" >&2; exit 1; }
for i in 1 2 3 4; do start_chunk "$i"; done
"$CAIRN" gateway --meta "$META" --http 127.0.0.1:$BASE_PORT --s3 "$S3" "${GW_ADMIN[@]}" "${GW_CACHES[@]}" "${GC[@]}" --console off --data "$OUT/gateway" \
	--join "$("$CAIRN" admin join-token --meta "$META" --role gateway)" >"$OUT/gateway.log" 2>&1 &
PID[gateway]=$!
wait_alive 4
for _ in $(seq 100); do "$CAIRN" ns ls >/dev/null 2>&1 && break; sleep 0.1; done
"$CAIRN" ns create soak >/dev/null

MOUNTARG=()
mkdir -p "$MNT"
if "$CAIRN" mount -d --meta "$META" "${MOUNT_CACHES[@]}" "${MOUNT_ADMIN[@]}" soak "$MNT" >"$OUT/mount.log" 2>&1; then
	PID[mount]=$(pgrep -n -f "mount.*$MNT" || true) # the daemon we just started, for its RSS
	[ -n "${PID[mount]}" ] || unset 'PID[mount]'
	MOUNTARG=(--mount "$MNT")
else
	echo "soak: no mount (FUSE unavailable?): the mount load is skipped; see $OUT/mount.log" >&2
fi

# RSS of every process, every 10 s: unix-ms name kB pid; and the
# machine's load average (name "load", in hundredths). soak-rss.awk reads it.
save_pids
(
	while :; do
		while read -r name pid; do
			kb=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
			[ -n "$kb" ] && echo "$(ms) $name $kb $pid"
		done <"$OUT/pids"
		echo "$(ms) load $(awk '{printf "%d", $1 * 100}' /proc/loadavg)"
		sleep 10
	done
) >"$OUT/rss.log" &
BG+=($!)
# heap NAME PORT: save NAME's heap profile and log its live heap (the
# profile's in-use total, in kB, and the pid, as rss.log has RSS).
heap() {
	local t f pid
	t=$(ms)
	pid=$(awk -v n="$1" '$1 == n { print $2 }' "$OUT/pids")
	f=$OUT/heap/$1.$((t / 1000)).pb.gz
	curl -sf -o "$f" "http://127.0.0.1:$2/debug/pprof/heap" || return 0
	go tool pprof -top -unit=kB -inuse_space "$f" 2>/dev/null |
		awk -v t="$t" -v n="$1" -v p="$pid" '/ total$/ { v = $(NF - 1); sub(/kB$/, "", v); printf "%s %s %.0f %s\n", t, n, v, p; exit }'
}
if [ -n "${PPROF:-}" ]; then
	mkdir -p "$OUT/heap"
	(
		while :; do
			sleep "$PPROF"
			heap meta $((BASE_PORT + 3))
			heap gateway $((BASE_PORT + 4))
			[ ${#MOUNTARG[@]} -eq 0 ] || heap mount $((BASE_PORT + 5))
			for i in 1 2 3 4; do heap chunk$i $((BASE_PORT + 5 + i)); done
		done
	) >"$OUT/heap.log" &
	BG+=($!)
fi

"$PWD/bin/soak" --endpoint "$CAIRN_ENDPOINT" --s3 "http://$S3" "${MOUNTARG[@]}" --duration "$DURATION" \
	--errors "$OUT/errors.log" --verify-when "$OUT/verify" >"$OUT/result.json" 2>"$OUT/verify.log" &
LOAD=$!

# Kill and restart a data server every KILL_EVERY seconds until the load's
# duration is over. Windows: unix-ms from to.
case $DURATION in
*h) secs=$((${DURATION%h} * 3600)) ;;
*m) secs=$((${DURATION%m} * 60)) ;;
*s) secs=${DURATION%s} ;;
*) echo "soak: DURATION is a whole number of s, m or h" >&2; exit 2 ;;
esac
END=$(($(date +%s) + secs))
n=0
: >"$OUT/kills.log"
while :; do
	next=$(($(date +%s) + KILL_EVERY))
	[ "$next" -lt "$END" ] || break
	sleep $((next - $(date +%s)))
	i=$((n % KILL_SERVERS + 1))
	n=$((n + 1))
	from=$(ms)
	kill -9 "${PID[chunk$i]}"
	wait "${PID[chunk$i]}" 2>/dev/null || true
	sleep "$DOWN"
	start_chunk "$i"
	wait_alive 4
	echo "$from $(($(ms) + GRACE * 1000)) chunk$i" >>"$OUT/kills.log"
	echo "soak: killed and restarted chunk$i" >&2
done
while kill -0 "$LOAD" 2>/dev/null && [ "$(date +%s)" -lt "$END" ]; do sleep 1; done
wait_alive 4
LOAD_END=$(ms) # the RSS summary is of the load; the read-back is shown apart
touch "$OUT/verify"
rc=0
wait "$LOAD" || rc=$?

echo "== result ($OUT)"
cat "$OUT/result.json"
head -20 "$OUT/verify.log"
echo "== kills"
cat "$OUT/kills.log"
echo "== errors (outside kill windows / total)"
awk 'NR == FNR { from[NR] = $1; to[NR] = $2; k = NR; next }
	{ inside = 0; for (i = 1; i <= k; i++) if ($1 >= from[i] && $1 <= to[i]) inside = 1
	  if (!inside) { out++; if (out <= 10) print "  outside: " $0 }; total++ }
	END { printf "%d / %d\n", out, total; exit out > 0 }' "$OUT/kills.log" "$OUT/errors.log" || rc=1
awk -v until="$LOAD_END" -f scripts/soak-rss.awk "$OUT/rss.log"
[ -z "${PPROF:-}" ] || awk -v until="$LOAD_END" -v what="live heap" -f scripts/soak-rss.awk "$OUT/heap.log"
exit $rc
