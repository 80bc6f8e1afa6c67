#!/usr/bin/env bash
# bench-nginx.sh: Cairn against nginx and dd on one machine, in one run.
#
# Starts `cairn server` (hot cache on, then a second with it off) and nginx
# on loopback ports, in a temporary directory, serving the same files, and
# drives both with the same load generator (`cairn bench`). Prints a table
# with ratios. Installs nothing; needs nginx, dd and go (for `make build`),
# and openssl for the TLS rows (both servers over HTTPS on the same client:
# skipped without it).
# Everything it starts it stops by PID, on exit or Ctrl-C.
#
# Knobs (environment): DURATION (10s per level), WARMUP (1s),
# SMALL_OBJECTS (100000), BIG_OBJECTS (100), STREAM_SIZE (1GiB),
# STREAM_ROUNDS (3; medians of the stream and dd runs),
# BASE_PORT (18080; uses 16 ports from there), KEEP_TMP=1 to keep the
# temporary directory, CAIRN_ROOT_USER/CAIRN_ROOT_PASSWORD (generated
# when unset).
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
SMALL_OBJECTS=${SMALL_OBJECTS:-100000}
BIG_OBJECTS=${BIG_OBJECTS:-100}
STREAM_SIZE=${STREAM_SIZE:-1GiB}
STREAM_ROUNDS=${STREAM_ROUNDS:-3}
BASE_PORT=${BASE_PORT:-18080}

cd "$(dirname "$0")/.."
for tool in nginx dd make go; do
	command -v "$tool" >/dev/null || { echo "bench-nginx: $tool is not installed" >&2; exit 1; }
done
NGINX=$(command -v nginx)

make build >/dev/null
CAIRN=$PWD/bin/cairn

TMP=$(mktemp -d "${TMPDIR:-/tmp}/cairn-bench.XXXXXX")
chmod 755 "$TMP" # nginx workers may run as another user
PIDS=()

cleanup() {
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ ${KEEP_TMP:-} == 1 ]]; then
		echo "kept $TMP"
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z ${CAIRN_ROOT_USER:-} ]]; then
	CAIRN_ROOT_USER=bench-root
	CAIRN_ROOT_PASSWORD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
fi
export CAIRN_ROOT_USER CAIRN_ROOT_PASSWORD
export CAIRN_ACCESS_KEY=$CAIRN_ROOT_USER CAIRN_SECRET_KEY=$CAIRN_ROOT_PASSWORD

log() { echo "== $*" >&2; }

# wait_http URL: until something answers there (30s at most).
wait_http() {
	for _ in $(seq 300); do
		if (exec 3<>"/dev/tcp/127.0.0.1/${1##*:}") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "bench-nginx: nothing listens on $1; see the logs in $TMP" >&2
	exit 1
}

# start_cairn NAME PORT [server flags...]: a one-process store on PORT
# (API), PORT+1 (meta), PORT+2 (data), PORT+3 (admin; --pprof, for the
# profile of the hot run). Sets CAIRN_PID.
start_cairn() {
	local name=$1 port=$2
	shift 2
	"$CAIRN" server --data "$TMP/$name" --http "127.0.0.1:$port" --meta-listen "127.0.0.1:$((port + 1))" \
		--chunk-listen "127.0.0.1:$((port + 2))" --admin "127.0.0.1:$((port + 3))" --s3 off --pprof "$@" >"$TMP/$name.log" 2>&1 &
	CAIRN_PID=$!
	PIDS+=("$CAIRN_PID")
	wait_http "127.0.0.1:$port"
}

stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# nginx_tls_server: the nginx server block for HTTPS on NGINX_TLS_PORT,
# with a throwaway certificate for 127.0.0.1 (clients get it as CAIRN_CA),
# when openssl is there.
nginx_tls_server() {
	[[ -n $OPENSSL ]] || return 0
	"$OPENSSL" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=127.0.0.1 \
		-addext subjectAltName=IP:127.0.0.1 -keyout "$TMP/nginx-key.pem" -out "$TMP/nginx-cert.pem" 2>/dev/null
	printf '\tserver {\n\t\tlisten 127.0.0.1:%s ssl;\n\t\tssl_certificate %s;\n\t\tssl_certificate_key %s;\n\t\troot %s;\n\t}\n' \
		"$NGINX_TLS_PORT" "$TMP/nginx-cert.pem" "$TMP/nginx-key.pem" "$TMP/www"
}

start_nginx() {
	mkdir -p "$TMP/nginx"
	cat >"$TMP/nginx.conf" <<EOF
daemon off;
worker_processes auto;
pid $TMP/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	tcp_nodelay on;
	keepalive_timeout 75s;
	keepalive_requests 10000000;
	default_type application/octet-stream;
	client_body_temp_path $TMP/nginx/body;
	proxy_temp_path $TMP/nginx/proxy;
	fastcgi_temp_path $TMP/nginx/fastcgi;
	uwsgi_temp_path $TMP/nginx/uwsgi;
	scgi_temp_path $TMP/nginx/scgi;
	server {
		listen 127.0.0.1:$NGINX_PORT;
		root $TMP/www;
	}
$(nginx_tls_server)
}
EOF
	"$NGINX" -p "$TMP/nginx" -c "$TMP/nginx.conf" >"$TMP/nginx.log" 2>&1 &
	PIDS+=("$!")
	wait_http "127.0.0.1:$NGINX_PORT"
}

# bench LABEL ARGS...: run `cairn bench ARGS`, keep its output as LABEL.
bench() {
	local label=$1
	shift
	settle
	log "$label: cairn bench $*"
	"$CAIRN" bench "$@" | tee "$TMP/$label.out"
}

# settle waits (60 s at most) until the running cairn server uses under a
# tenth of a core: the background work a previous row left behind (Pebble
# compactions after 100,000 uploads, volume compaction) would otherwise be
# measured as part of the next row. It took 10-20 s after the uploads.
settle() {
	[[ -n ${CAIRN_PID:-} && -r /proc/$CAIRN_PID/stat ]] || return 0
	local hz ticks prev
	hz=$(getconf CLK_TCK)
	prev=$(awk '{ print $14 + $15 }' "/proc/$CAIRN_PID/stat")
	for _ in $(seq 60); do
		sleep 1
		ticks=$(awk '{ print $14 + $15 }' "/proc/$CAIRN_PID/stat" 2>/dev/null) || return 0
		if (( (ticks - prev) * 10 < hz )); then return 0; fi
		prev=$ticks
	done
	log "the server did not settle within 60 s; measuring anyway"
}

# ops LABEL CONC: ops/s of a result row (the name is two words: "get 4KiB").
ops() { awk -v c="$2" '$3 == c && $4 ~ /^[0-9.]+$/ { print $4; exit }' "$TMP/$1.out"; }
# p50 LABEL CONC
p50() { awk -v c="$2" '$3 == c && $4 ~ /^[0-9.]+$/ { print $6; exit }' "$TMP/$1.out"; }

# dd_mbps: MB/s from dd's summary line ("..., 1.2 s, 870 MB/s").
dd_mbps() {
	awk -F', ' '/copied/ { split($NF, a, " "); v = a[1]; u = a[2]
		if (u == "GB/s") v *= 1000; else if (u == "kB/s") v /= 1000; else if (u == "B/s") v /= 1e6
		print v }'
}

drop_caches() {
	sync
	if [[ -w /proc/sys/vm/drop_caches ]]; then echo 3 >/proc/sys/vm/drop_caches; fi
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a / b }'; }

CAIRN_PORT=$BASE_PORT
COLD_PORT=$((BASE_PORT + 4))
NGINX_PORT=$((BASE_PORT + 8))
NGINX_TLS_PORT=$((BASE_PORT + 9))
TLS_PORT=$((BASE_PORT + 12))
OPENSSL=$(command -v openssl || true)
HOT=http://127.0.0.1:$CAIRN_PORT
COLD=http://127.0.0.1:$COLD_PORT
NGX=http://127.0.0.1:$NGINX_PORT
LOAD=(--duration "$DURATION" --warmup "$WARMUP")

log "preparing files for nginx in $TMP/www"
"$CAIRN" bench get --size 155KiB --objects "$BIG_OBJECTS" --prepare-dir "$TMP/www/big"
"$CAIRN" bench get --size 4KiB --objects "$SMALL_OBJECTS" --prepare-dir "$TMP/www/small"
chmod -R a+rX "$TMP/www"

start_nginx
start_cairn hot "$CAIRN_PORT"
HOT_PID=$CAIRN_PID

bench big-hot get --endpoint "$HOT" --ns big --size 155KiB --objects "$BIG_OBJECTS" --concurrency 1,10 "${LOAD[@]}"
bench big-nginx get --target "$NGX/big" --size 155KiB --objects "$BIG_OBJECTS" --concurrency 1,10 "${LOAD[@]}"
# Upload the small objects first, so that their compactions are over (see
# settle) before the measured row.
bench small-upload get --endpoint "$HOT" --ns small --size 4KiB --objects "$SMALL_OBJECTS" --concurrency 16 --duration 1s --warmup 0s
bench small-hot get --endpoint "$HOT" --ns small --size 4KiB --objects "$SMALL_OBJECTS" --concurrency 16 "${LOAD[@]}"
bench small-nginx get --target "$NGX/small" --size 4KiB --objects "$SMALL_OBJECTS" --concurrency 16 "${LOAD[@]}"
# meta before the PUTs: their Pebble compactions would otherwise run
# under the Resolve benchmark.
# Meta speaks TLS only: trust the store's cluster CA.
CAIRN_CA="$TMP/hot/meta/ca.pem" bench meta meta --meta "127.0.0.1:$((CAIRN_PORT + 1))" --concurrency 32 "${LOAD[@]}"
bench put put --endpoint "$HOT" --size 4KiB --concurrency 16 "${LOAD[@]}"

# The disk of a shared virtual machine swings by 2x from one minute to the
# next: cairn's stream and dd take turns, STREAM_ROUNDS times, and the
# medians are compared.
STREAM_MB=$(( $(numfmt --from=iec-i "${STREAM_SIZE%B}") / 1048576 ))
median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
PUTS="" GETS="" DDW="" DDR=""
for round in $(seq "$STREAM_ROUNDS"); do
	log "stream $STREAM_SIZE, round $round: cairn PUT then GET (page cache dropped between if permitted), then dd"
	"$CAIRN" bench stream --endpoint "$HOT" --size "$STREAM_SIZE" --drop-caches --json | tee "$TMP/stream.json"
	PUTS+=" $(awk -F': ' '/put_mb_per_sec/ { printf "%.0f", $2 }' "$TMP/stream.json")"
	GETS+=" $(awk -F': ' '/get_mb_per_sec/ { printf "%.0f", $2 }' "$TMP/stream.json")"
	DDW+=" $(dd if=/dev/zero of="$TMP/dd.bin" bs=1M count="$STREAM_MB" conv=fsync 2>&1 | dd_mbps)"
	drop_caches
	DDR+=" $(dd if="$TMP/dd.bin" of=/dev/null bs=1M 2>&1 | dd_mbps)"
	rm -f "$TMP/dd.bin"
done
log "stream PUT MB/s:$PUTS; dd write:$DDW; stream GET:$GETS; dd read:$DDR"
STREAM_PUT=$(echo "$PUTS" | median) STREAM_GET=$(echo "$GETS" | median)
DD_WRITE=$(echo "$DDW" | median) DD_READ=$(echo "$DDR" | median)
"$CAIRN" admin profile --admin "127.0.0.1:$((CAIRN_PORT + 3))" >"$TMP/profile.out" || true
stop "$HOT_PID"

start_cairn cold "$COLD_PORT" --hot-cache-size 0
COLD_PID=$CAIRN_PID
bench big-cold get --endpoint "$COLD" --ns big --size 155KiB --objects "$BIG_OBJECTS" --concurrency 1,10 "${LOAD[@]}"
stop "$COLD_PID"

# The same GETs over HTTPS (keep-alive), against the no-hot plain run
# above: cairn --tls auto (hot cache off) and nginx with ssl.
if [[ -n $OPENSSL ]]; then
	start_cairn tls "$TLS_PORT" --hot-cache-size 0 --tls auto
	TLS_PID=$CAIRN_PID
	CAIRN_CA="$TMP/tls/meta/ca.pem" bench big-tls get --endpoint "https://127.0.0.1:$TLS_PORT" --ns big --size 155KiB --objects "$BIG_OBJECTS" --concurrency 1,10 "${LOAD[@]}"
	stop "$TLS_PID"
	CAIRN_PID=""
	CAIRN_CA="$TMP/nginx-cert.pem" bench big-nginx-tls get --target "https://127.0.0.1:$NGINX_TLS_PORT/big" --size 155KiB --objects "$BIG_OBJECTS" --concurrency 1,10 "${LOAD[@]}"
fi

row() { printf '%-34s %14s %14s %14s %10s\n' "$@"; }
echo
echo "Cairn vs nginx and dd, one machine, loopback; $DURATION per row; ops/s unless noted"
row "test" "cairn" "cairn no-hot" "nginx / dd" "ratio"
for c in 1 10; do
	h=$(ops big-hot $c) n=$(ops big-nginx $c) k=$(ops big-cold $c)
	row "GET 155KiB c=$c" "$h" "$k" "$n" "$(ratio "$h" "$n")"
	row "  p50 latency" "$(p50 big-hot $c)" "$(p50 big-cold $c)" "$(p50 big-nginx $c)" ""
done
if [[ -n $OPENSSL ]]; then
	for c in 1 10; do
		t=$(ops big-tls $c) k=$(ops big-cold $c) n=$(ops big-nginx-tls $c) p=$(ops big-nginx $c)
		row "GET 155KiB TLS c=$c" "" "$t" "$n" "$(ratio "$t" "$n")"
		row "  TLS / plain" "" "$(ratio "$t" "$k")" "$(ratio "$n" "$p")" ""
	done
fi
h=$(ops small-hot 16) n=$(ops small-nginx 16)
row "GET 4KiB x $SMALL_OBJECTS c=16" "$h" "" "$n" "$(ratio "$h" "$n")"
row "PUT 4KiB c=16" "$(ops put 16)" "" "" ""
row "stream $STREAM_SIZE write MB/s (median)" "$STREAM_PUT" "" "$DD_WRITE" "$(ratio "$STREAM_PUT" "$DD_WRITE")"
row "stream $STREAM_SIZE read MB/s (median)" "$STREAM_GET" "" "$DD_READ" "$(ratio "$STREAM_GET" "$DD_READ")"
row "meta Resolve (4 deep) c=32" "$(ops meta 32)" "" "" ""
echo "ratio: cairn (hot cache on) / nginx or dd. Server profile of the hot run:"
cat "$TMP/profile.out"
