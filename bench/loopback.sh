# Sourced by bench/service/workers and bench/gateway/per-request: a temporary directory ($DIR),
# the processes started on loopback ($PIDS, all stopped, and $DIR removed, at exit), and helpers
# to wait for their ports, to write an nginx prefix and to count instructions under callgrind.

DIR=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

# wait_port PORT: until something accepts on 127.0.0.1:PORT (at most 30 s).
wait_port() { for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# wait_gone PORT: until nothing accepts on it any more (at most 10 s).
wait_gone() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null || return 0; sleep 0.1; done; return 1; }
# stop PID: SIGTERM, and wait for it.
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# nginx_conf NAME WORKERS HTTP [MASTER]: $DIR/NAME/nginx.conf, in the foreground, with WORKERS
# worker processes, `master_process` MASTER (on by default), no access log, its temporary paths in
# $DIR/NAME, and HTTP's text in its `http` block.
nginx_conf() {
  mkdir -p "$DIR/$1"
  cat >"$DIR/$1/nginx.conf" <<NGINX
daemon off;
master_process ${4:-on};
worker_processes $2;
pid $DIR/$1/nginx.pid;
error_log $DIR/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $DIR/$1/body;
  proxy_temp_path $DIR/$1/proxy;
  fastcgi_temp_path $DIR/$1/fastcgi;
  uwsgi_temp_path $DIR/$1/uwsgi;
  scgi_temp_path $DIR/$1/scgi;
  keepalive_requests 1000000000;
$3
}
NGINX
}

# instructions NAME PORT COMMAND...: the user-space instructions a request of COMMAND, run under
# valgrind's callgrind, over 10 s of load after 5 s of warm-up. The load is the sourcing script's
# `drive PORT SECS`, which prints wrk's output. The same binary gives the same count, however busy
# the machine; the kernel's share is not in it, and a `rep movsb` copy counts one instruction a byte.
instructions() {
  local name=$1 port=$2 pid requests total=0 n f
  shift 2
  mkdir -p "$DIR/cg"; rm -f "$DIR"/cg/*
  valgrind --tool=callgrind --callgrind-out-file="$DIR/cg/out.%p" "$@" >/dev/null 2>&1 &
  pid=$!; PIDS+=("$pid")
  wait_port "$port" || { echo "instructions: $name did not start under valgrind" >&2; exit 1; }
  drive "$port" 5 >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  requests=$(drive "$port" 10 | awk '/requests in/ { print $1 }')
  callgrind_control -d "$pid" >/dev/null 2>&1
  for f in "$DIR"/cg/out.*.*; do
    n=$(awk '/^(summary|totals):/ { print $2; exit }' "$f"); total=$((total + ${n:-0}))
  done
  stop "$pid"; wait_gone "$port"
  printf "  %-52s %8d requests   %6d instructions a request\n" "$name" "$requests" $((total / requests))
}
