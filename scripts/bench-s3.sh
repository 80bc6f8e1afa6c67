#!/usr/bin/env bash
# bench-s3.sh: the S3 API against the native API and the local disk, on one
# machine, in one run (the figures of issue 5).
#
# Starts `cairn server` on loopback ports in a temporary directory and runs,
# alternating native and S3 ROUNDS times so that noise hits both alike:
#   GET 155KiB c=10 (public bucket, anonymous on both APIs; and signed:
#     Basic auth on the native API, SigV4 on S3)
#   PUT 4KiB c=10 (Basic auth vs SigV4 with a signed payload hash)
#   a 1GiB multipart upload in 8 parallel parts vs writing (and fsyncing)
#     the same bytes to a file in the same data directory, and the native
#     API's streamed PUT of the same size
# Everything it starts it stops by PID. Knobs: DURATION (10s), WARMUP (1s),
# ROUNDS (2), OBJECTS (100), MP_SIZE (1GiB), MP_PARTS (8), BASE_PORT (19080),
# KEEP_TMP=1.
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
ROUNDS=${ROUNDS:-2}
OBJECTS=${OBJECTS:-100}
MP_SIZE=${MP_SIZE:-1GiB}
MP_PARTS=${MP_PARTS:-8}
BASE_PORT=${BASE_PORT:-19080}

cd "$(dirname "$0")/.."
make build >/dev/null
CAIRN=$PWD/bin/cairn
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cairn-bench-s3.XXXXXX")
PID=
cleanup() {
	if [[ -n $PID ]]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
	if [[ ${KEEP_TMP:-} == 1 ]]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export CAIRN_ROOT_USER=bench-root
CAIRN_ROOT_PASSWORD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export CAIRN_ROOT_PASSWORD CAIRN_ACCESS_KEY=$CAIRN_ROOT_USER CAIRN_SECRET_KEY=$CAIRN_ROOT_PASSWORD
HTTP=127.0.0.1:$BASE_PORT
S3=127.0.0.1:$((BASE_PORT + 4))
export CAIRN_ENDPOINT=http://$HTTP CAIRN_S3_ENDPOINT=http://$S3

"$CAIRN" server --data "$TMP/data" --http "$HTTP" --meta-listen "127.0.0.1:$((BASE_PORT + 1))" \
	--chunk-listen "127.0.0.1:$((BASE_PORT + 2))" --admin off --s3 "$S3" >"$TMP/server.log" 2>&1 &
PID=$!
for _ in $(seq 300); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$((BASE_PORT + 4))") 2>/dev/null; then break; fi
	sleep 0.1
done

LOAD=(--concurrency 10 --duration "$DURATION" --warmup "$WARMUP" --json)
# run LABEL ARGS...: one benchmark; its ops/s is appended to $TMP/LABEL.
run() {
	local label=$1
	shift
	echo "== $label: cairn bench $*" >&2
	"$CAIRN" bench "$@" "${LOAD[@]}" >"$TMP/last.json"
	awk -F': ' '/"ops_per_sec"/ { gsub(/,/, "", $2); print $2 }' "$TMP/last.json" >>"$TMP/$label"
	awk -F': ' '/"errors"/ { gsub(/,/, "", $2); if ($2 != 0) { print "errors: " $2; exit 1 } }' "$TMP/last.json"
}
for r in $(seq "$ROUNDS"); do
	run get-native get --ns big --size 155KiB --objects "$OBJECTS"
	run get-s3 get --api s3 --ns big --size 155KiB --objects "$OBJECTS"
	run getp-native get --ns bigp --private --size 155KiB --objects "$OBJECTS"
	run getp-s3 get --api s3 --ns bigp --private --size 155KiB --objects "$OBJECTS"
	run put-native put --size 4KiB
	run put-s3 put --api s3 --size 4KiB
done
echo "== multipart $MP_SIZE in $MP_PARTS parts, then the same bytes to a file in $TMP/data" >&2
"$CAIRN" bench multipart --size "$MP_SIZE" --parts "$MP_PARTS" --disk "$TMP/data" | tee "$TMP/multipart"
echo "== the native API's one-stream write of $MP_SIZE, for the store's own write speed" >&2
"$CAIRN" bench stream --size "$MP_SIZE" --no-verify | tee -a "$TMP/multipart"

mean() { awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }' "$TMP/$1"; }
all() { paste -sd/ "$TMP/$1" | awk '{ gsub(/\.[0-9]+/, ""); print }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
row() { printf '%-36s %18s %18s %8s\n' "$@"; }
echo
echo "S3 vs native API, one machine, loopback, c=10, $DURATION x $ROUNDS rounds (mean; each round)"
row test "native ops/s" "s3 ops/s" ratio
for t in get getp put; do
	case $t in get) name="GET 155KiB (anonymous, public)" ;; getp) name="GET 155KiB (signed)" ;; put) name="PUT 4KiB (signed)" ;; esac
	row "$name" "$(mean $t-native) ($(all $t-native))" "$(mean $t-s3) ($(all $t-s3))" "$(ratio "$(mean $t-s3)" "$(mean $t-native)")"
done
cat "$TMP/multipart"
