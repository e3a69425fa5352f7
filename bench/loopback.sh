# Sourced by bench/service/workers and bench/gateway/per-request: a temporary directory ($DIR),
# the processes started on loopback ($PIDS, all stopped, and $DIR removed, at exit), and helpers
# to wait for their ports and to write an nginx prefix.

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
