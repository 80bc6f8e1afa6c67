#!/usr/bin/env bash
# bench-metagroup.sh: 4 KiB PUTs through a gateway, one meta against a
# group of three, with the CPU each process spent per PUT.
#
# Two clusters run at once on this machine (the idle one costs little):
# one meta alone, and a group of three (the first founds it, the others
# join with a meta join token), each with DATA data servers and a
# gateway. They are measured in turn, ROUNDS times, so that each round's
# ratio compares figures taken seconds apart on a machine whose load
# drifts. After each run the script prints PUTs/s and the CPU time (user
# and system, from /proc/PID/stat) of every role per PUT: where a
# group's PUT spends what a lone meta's does not.
#
# With CAIRN_OLD=/path/to/an/older/cairn each round also measures that
# binary's two clusters, interleaved with this tree's ("before" and
# "after" in the same minutes).
#
# Knobs: DURATION (6s), CONCURRENCY (10), SIZE (4KiB), ROUNDS (2), DATA
# (2), BASE_PORT (49500: each cluster takes 20 ports from there), CAIRN (a
# binary to measure instead of building this tree's), CAIRN_OLD, PROFILE
# (a directory: each meta serves pprof, and every run writes a CPU profile
# of each meta there, NAME-metaI-rR.prof), IDLE (seconds: before each run,
# the CPU each process spends per second with no load, such as a group's
# heartbeats and commit-index appends).
# Everything it starts it stops by PID.
set -euo pipefail
DURATION=${DURATION:-6s}
CONCURRENCY=${CONCURRENCY:-10}
SIZE=${SIZE:-4KiB}
ROUNDS=${ROUNDS:-2}
DATA=${DATA:-2}
BASE_PORT=${BASE_PORT:-49500}

cd "$(dirname "$0")/.."
if [[ -z ${CAIRN:-} ]]; then
	make build >/dev/null
	CAIRN=$PWD/bin/cairn
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cairn-mgbench.XXXXXX")
PIDS=()
export CAIRN_ROOT_USER=bench CAIRN_ROOT_PASSWORD=bench-password-123
export CAIRN_ACCESS_KEY=bench CAIRN_SECRET_KEY=bench-password-123
stop_all() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	PIDS=()
}
trap 'stop_all; rm -rf "$TMP"' EXIT

# start BIN NAME METAS PORT: a cluster of METAS metas (1: alone), DATA data
# servers and a gateway; sets <NAME>_EP, <NAME>_CA and <NAME>_PIDS (role=pid ...).
start() {
	local bin=$1 name=$2 metas=$3 port=$4 dir=$TMP/$2 roles=() addrs=() i tok="" dtok gtok
	mkdir -p "$dir"
	for ((i = 0; i < metas; i++)); do addrs+=("127.0.0.1:$((port + 1 + 2 * i))"); done
	local meta0=${addrs[0]} all
	all=$(IFS=,; echo "${addrs[*]}")
	for ((i = 0; i < metas; i++)); do
		local args=(meta --data "$dir/meta$i" --listen "${addrs[i]}" --admin off --replication 1 --dead-after 5s)
		if [[ -n ${PROFILE:-} ]]; then
			args+=(--admin "127.0.0.1:$((port + 15 + i))" --pprof)
		fi
		if ((metas > 1)); then
			args+=(--raft-listen "127.0.0.1:$((port + 2 + 2 * i))")
			if ((i == 0)); then
				args+=(--bootstrap "$meta0=127.0.0.1:$((port + 2))")
			else
				args+=(--join "$tok" --meta "$meta0")
			fi
		fi
		"$bin" "${args[@]}" >"$dir/meta$i.log" 2>&1 &
		PIDS+=($!)
		roles+=("meta$i=$!")
		if ((i == 0)); then
			export CAIRN_CA=$dir/meta0/ca.pem
			for _ in $(seq 300); do # until meta answers (and, in a group, leads)
				dtok=$("$bin" admin join-token --meta "$meta0" --role data --uses "$DATA" 2>/dev/null) && break
				sleep 0.1
			done
			((metas > 1)) && tok=$("$bin" admin join-token --meta "$meta0" --role meta --uses $((metas - 1)))
		fi
	done
	export CAIRN_CA=$dir/meta0/ca.pem
	for _ in $(seq 300); do # every member in
		[ "$("$bin" admin meta ls --meta "$meta0" 2>/dev/null | grep -c 127.0.0.1)" -ge "$metas" ] && break
		((metas == 1)) && break
		sleep 0.2
	done
	gtok=$("$bin" admin join-token --meta "$all" --role gateway)
	for ((i = 1; i <= DATA; i++)); do
		"$bin" chunk --data "$dir/chunk$i" --listen "127.0.0.1:$((port + 10 + i))" --meta "$all" \
			--admin off --join "$dtok" >"$dir/chunk$i.log" 2>&1 &
		PIDS+=($!)
		roles+=("chunk$i=$!")
	done
	"$bin" gateway --meta "$all" --http "127.0.0.1:$port" --admin off --s3 off --console off \
		--hot-cache-size 0 --data "$dir/gw" --join "$gtok" >"$dir/gw.log" 2>&1 &
	PIDS+=($!)
	roles+=("gateway=$!")
	for _ in $(seq 150); do
		[ "$("$bin" admin status --meta "$all" 2>/dev/null | grep -c ' alive ')" = "$DATA" ] && break
		sleep 0.2
	done
	printf -v "${name}_EP" '%s' "http://127.0.0.1:$port"
	printf -v "${name}_CA" '%s' "$dir/meta0/ca.pem"
	printf -v "${name}_META" '%s' "$all"
	printf -v "${name}_PIDS" '%s' "${roles[*]}"
}

# cpu PID: user+system clock ticks so far.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure BIN NAME: one bench run against cluster NAME, then PUTs/s and
# CPU ms per 1000 PUTs for each role.
measure() {
	local bin=$1 name=$2 ep ca pids out before=() after=() i=0 role pid
	ep=${name}_EP ca=${name}_CA pids=${name}_PIDS
	if [[ -n ${IDLE:-} ]]; then
		local idle0=() j=0 il
		il=$(printf '%-14s idle CPU ms/s:' "$name")
		for role in ${!pids}; do idle0+=("$(cpu "${role#*=}")"); done
		sleep "$IDLE"
		for role in ${!pids}; do
			il+=" ${role%%=*} $(( ($(cpu "${role#*=}") - idle0[j]) * 10 / IDLE ))"
			j=$((j + 1))
		done
		echo "$il"
	fi
	for role in ${!pids}; do before+=("$(cpu "${role#*=}")"); done
	local profs=()
	if [[ -n ${PROFILE:-} ]]; then
		local port=${!ep##*:} secs=${DURATION%s} m=0
		for role in ${!pids}; do
			[[ $role == meta* ]] || continue
			curl -s -o "$PROFILE/$name-${role%%=*}-r$r.prof" "http://127.0.0.1:$((port + 15 + m))/debug/pprof/profile?seconds=$((secs - 1))" &
			profs+=($!)
			m=$((m + 1))
		done
	fi
	out=$(CAIRN_CA=${!ca} /usr/bin/time -f 'client %U %S' "$bin" bench put --endpoint "${!ep}" --size "$SIZE" \
		--concurrency "$CONCURRENCY" --duration "$DURATION" --warmup 0s --ns "b$name" 2>&1)
	for role in ${!pids}; do after+=("$(cpu "${role#*=}")"); done
	for pid in "${profs[@]}"; do wait "$pid" || true; done
	local ops n load
	# The row's name holds a space ("put 4KiB"): count from its end
	# (... OPS/S MB/S P50 P90 P99 MAX OPS ERRORS).
	ops=$(echo "$out" | awk '$1=="put"{print $(NF-7); exit}')
	n=$(echo "$out" | awk '$1=="put"{print $(NF-1); exit}')
	load=$(cut -d' ' -f1 /proc/loadavg)
	local line
	line=$(printf '%-14s %8s PUT/s  load %5s  CPU ms per 1000 PUTs:' "$name" "$ops" "$load")
	local metas=0
	for role in ${!pids}; do
		local d=$(( (after[i] - before[i]) * 10 )) # ticks (10 ms) -> ms
		i=$((i + 1))
		case $role in meta*) metas=$((metas + d)) ;; esac
		line+=$(printf ' %s %d' "${role%%=*}" $((d * 1000 / (n > 0 ? n : 1))))
	done
	local cl
	cl=$(echo "$out" | awk '/^client/{printf "%d", ($2 + $3) * 1000}')
	line+=$(printf ' | metas %d client %d' $((metas * 1000 / (n > 0 ? n : 1))) $((cl * 1000 / (n > 0 ? n : 1))))
	echo "$line"
}

namespaces() { # BIN NAME: the bench namespace, replication 1
	local bin=$1 name=$2 ca=${2}_CA meta=${2}_META
	for _ in $(seq 50); do
		CAIRN_CA=${!ca} "$bin" ns create "b$name" --endpoint "$(eval echo \$${name}_EP)" >/dev/null 2>&1 && return
		sleep 0.2
	done
}

clusters=(new1:"$CAIRN":1 new3:"$CAIRN":3)
if [[ -n ${CAIRN_OLD:-} ]]; then
	clusters=(old1:"$CAIRN_OLD":1 old3:"$CAIRN_OLD":3 "${clusters[@]}")
fi
p=$BASE_PORT
for c in "${clusters[@]}"; do
	IFS=: read -r name bin metas <<<"$c"
	start "$bin" "$name" "$metas" "$p"
	namespaces "$bin" "$name"
	p=$((p + 20))
done
echo "PUT $SIZE c=$CONCURRENCY for $DURATION; per-role CPU from /proc (metas: all members)"
for ((r = 1; r <= ROUNDS; r++)); do
	echo "== round $r"
	for c in "${clusters[@]}"; do
		IFS=: read -r name bin metas <<<"$c"
		measure "$bin" "$name"
	done
done
