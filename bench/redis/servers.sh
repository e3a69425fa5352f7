# Sourced by bench/redis/deadline and bench/redis/drills: a free port, loopback redis-servers in a
# temporary directory, one node and a cluster of 3 masters, all stopped (with anything added to
# PIDS) at exit.
#
# After sourcing: NODE (the node's port), SEEDS (the cluster's 127.0.0.1:PORT), free_port.

# A free port whose cluster bus port (port + 10000) is free too: cluster nodes need both, below 55536.
free_port() { python3 -c '
import random, socket
while True:
    port = random.randrange(20000, 45000)
    try:
        for p in (port, port + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", p)); s.close()
    except OSError:
        continue
    print(port); break'; }

DIR=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$DIR"' EXIT

redis() { # redis PORT [ARGS...]: a redis-server in $DIR/PORT, no persistence
  local port=$1; shift
  mkdir -p "$DIR/$port"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$DIR/$port" --save '' --appendonly no \
    --logfile "$DIR/$port/log" "$@" &
  PIDS+=($!)
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
}

NODE=$(free_port); redis "$NODE"
SEEDS=()
for _ in 1 2 3; do
  p=$(free_port); redis "$p" --cluster-enabled yes --cluster-config-file "$DIR/$p/nodes.conf"
  SEEDS+=("127.0.0.1:$p")
done
redis-cli --cluster create "${SEEDS[@]}" --cluster-yes >/dev/null
until redis-cli -p "${SEEDS[0]#*:}" cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
