#!/usr/bin/env bash
# bench-cluster.sh: a 4-data-server cluster on this machine, measured.
#
#   1. local baseline: dd of STREAM_SIZE with fsync into the data directory
#   2. `cairn bench put --size 4KiB`, RF 3 and RF 1
#   3. `cairn bench stream` of STREAM_SIZE through the gateway, RF 3 and RF 1
#   4. restore: write RESTORE_SIZE (RF 3), kill -9 a data server holding it,
#      time until `cairn admin status` shows every volume at 3/3 again, with
#      `cairn bench put` (1MiB objects) running meanwhile.
#
# Each RF runs on a fresh cluster (meta --replication N). Everything it
# starts it stops by PID. Knobs: STREAM_SIZE (1GiB), RESTORE_SIZE (2GiB),
# DURATION (10s), CONCURRENCY (16), REPAIR_RATE (1GiB), BASE_PORT (19200),
# CAIRN (a cairn binary to measure instead of building this tree's).
set -euo pipefail
STREAM_SIZE=${STREAM_SIZE:-1GiB}
RESTORE_SIZE=${RESTORE_SIZE:-2GiB}
DURATION=${DURATION:-10s}
CONCURRENCY=${CONCURRENCY:-16}
REPAIR_RATE=${REPAIR_RATE:-1GiB}
BASE_PORT=${BASE_PORT:-19200}

cd "$(dirname "$0")/.."
if [[ -z ${CAIRN:-} ]]; then # CAIRN=/path/to/an/older/cairn measures that one ("before")
	make build >/dev/null
	CAIRN=$PWD/bin/cairn
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cairn-cbench.XXXXXX")
PIDS=()
export CAIRN_ROOT_USER=bench CAIRN_ROOT_PASSWORD=bench-password-123
export CAIRN_ENDPOINT=http://127.0.0.1:$BASE_PORT
META=127.0.0.1:$((BASE_PORT + 1))

stop_all() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
	PIDS=()
}
trap 'stop_all; rm -rf "$TMP"' EXIT

start_cluster() { # $1 = replication
	stop_all
	rm -rf "$TMP/c"
	mkdir -p "$TMP/c"
	"$CAIRN" meta --data "$TMP/c/meta" --listen "$META" --admin off --replication "$1" \
		--dead-after 5s --repair-rate "$REPAIR_RATE" >"$TMP/c/meta.log" 2>&1 &
	PIDS+=($!)
	# A cluster with trust (issue 14) admits its data servers and gateway
	# by join token over mutual TLS; an older binary (a "before" run) has
	# no such command and takes them as they come.
	local join_data=() join_gw=()
	if "$CAIRN" admin join-token --help 2>/dev/null | grep -q -- --role; then
		export CAIRN_CA=$TMP/c/meta/ca.pem
		local tok=""
		for _ in $(seq 100); do # until meta answers
			tok=$("$CAIRN" admin join-token --meta "$META" --role data --uses 4 2>/dev/null) && break
			sleep 0.1
		done
		join_data=(--join "$tok")
		join_gw=(--join "$("$CAIRN" admin join-token --meta "$META" --role gateway)" --data "$TMP/c/gw" --console off)
	fi
	for i in 1 2 3 4; do
		"$CAIRN" chunk --data "$TMP/c/chunk$i" --listen 127.0.0.1:$((BASE_PORT + 10 + i)) --meta "$META" \
			--admin off --label rack=r$((i % 2)) "${join_data[@]}" >"$TMP/c/chunk$i.log" 2>&1 &
		PIDS+=($!)
	done
	"$CAIRN" gateway --meta "$META" --http 127.0.0.1:$BASE_PORT --admin off --hot-cache-size 0 "${join_gw[@]}" >"$TMP/c/gw.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 100); do
		[ "$("$CAIRN" admin status --meta "$META" 2>/dev/null | grep -c ' alive ')" = 4 ] && break
		sleep 0.2
	done
	sleep 1
}

echo "== local write+fsync baseline ($STREAM_SIZE via dd, data dir filesystem)"
mkdir -p "$TMP/dd"
BYTES=$(( $(echo "$STREAM_SIZE" | sed 's/GiB/*1073741824/;s/MiB/*1048576/') ))
dd if=/dev/zero of="$TMP/dd/f" bs=8M count=$((BYTES / 8388608)) conv=fsync 2>&1 | tail -1
rm -f "$TMP/dd/f"

for rf in 3 1; do
	start_cluster $rf
	# Small PUTs first: after a big stream the disk is still writing back
	# gigabytes of replicas, which would weigh on whichever runs next.
	echo "== RF $rf: 4 KiB PUTs, concurrency $CONCURRENCY"
	"$CAIRN" bench put --size 4KiB --concurrency "$CONCURRENCY" --duration "$DURATION" --ns "bench$rf"
	echo "== RF $rf: stream $STREAM_SIZE"
	"$CAIRN" bench stream --size "$STREAM_SIZE" --ns "bench$rf"
	sync
done

start_cluster 3
echo "== restore: $RESTORE_SIZE at RF 3, then kill -9 a data server holding it"
RB=$(( $(echo "$RESTORE_SIZE" | sed 's/GiB/*1073741824/;s/MiB/*1048576/') ))
head -c "$RB" /dev/urandom >"$TMP/big"
"$CAIRN" ns create restore
"$CAIRN" put "$TMP/big" restore/big
rm -f "$TMP/big"
"$CAIRN" admin status --meta "$META" | sed -n '/^VOLUME/,/^$/p'
VICTIM=$("$CAIRN" admin status --meta "$META" | awk '/^VOLUME/{v=1;next} v&&NF>=7{split($7,s,",");print s[1];exit}')
VPID=""
for i in 1 2 3 4; do [ "127.0.0.1:$((BASE_PORT + 10 + i))" = "$VICTIM" ] && VPID=${PIDS[$i]}; done
echo "killing $VICTIM (pid $VPID)"
kill -9 "$VPID"
T0=$(date +%s.%N)
"$CAIRN" bench put --size 1MiB --concurrency 4 --duration 20s --warmup 0s --ns load >"$TMP/load.txt" 2>&1 &
LOADPID=$!
while :; do
	S=$("$CAIRN" admin status --meta "$META")
	if echo "$S" | grep -q " dead " && ! echo "$S" | grep -qE ' (degraded|repairing|lost) ' && echo "$S" | grep -q '^volumes: .* 0 degraded, 0 repairing, 0 lost'; then
		break
	fi
	sleep 0.5
done
T1=$(date +%s.%N)
echo "RF 3 restored $(echo "$T1 - $T0" | bc) s after the kill (dead-after 5s, repair-rate $REPAIR_RATE)"
"$CAIRN" admin status --meta "$META" | sed -n '/^VOLUME/,$p'
wait "$LOADPID" || true
echo "client PUTs (1 MiB, c=4) during the first 20 s after the kill:"
cat "$TMP/load.txt"
