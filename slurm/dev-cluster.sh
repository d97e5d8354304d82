#!/usr/bin/env bash
# Single-node SLURM development cluster for sweeper: munged + MariaDB + slurmdbd + slurmctld + slurmd,
# started by hand (no systemd), everything as root, all state under one folder.
#
#   bash slurm/dev-cluster.sh install   # apt packages (idempotent, fast when present)
#   bash slurm/dev-cluster.sh start     # install if needed, start all daemons, wait for the node; last line: export SLURM_CONF=...
#   bash slurm/dev-cluster.sh stop      # cancel jobs, stop every daemon by its PID file (bounded)
#   bash slurm/dev-cluster.sh status    # which daemons are alive, sinfo
#
# Env: SWEEPER_SLURM_DIR (state dir, default /tmp/sweeper-slurm), SWEEPER_SLURM_DB_PORT (MariaDB, default 33061),
#      SWEEPER_SLURM_GPUS (fake GPUs, default 4), SWEEPER_SLURM_START_TIMEOUT (seconds, default 90).
#
# Two-host cluster (cluster=dev2): the same commands with "dev2" as second argument. Two slurmd, dev2n1 and dev2n2,
# each in its own network namespace (veth into a bridge, its own IP) and UTS namespace (its own hostname);
# slurmctld, slurmdbd, MariaDB and munged in the root namespace. Separate state dir, ports, munge key and database,
# so it runs beside the single-node cluster.
#   bash slurm/dev-cluster.sh start dev2          # last line: export SLURM_CONF=<dev2 state>/etc/slurm.conf
#   bash slurm/dev-cluster.sh stop|status dev2
#   bash slurm/dev-cluster.sh kill-node dev2 NODE # SIGKILL every process of NODE's namespaces (a host lost)
#   bash slurm/dev-cluster.sh start dev2          # again: restarts any dead slurmd (the node returns to service)
# Env (dev2): SWEEPER_SLURM_DEV2_DIR (default /tmp/sweeper-slurm-dev2), SWEEPER_SLURM_DEV2_DB_PORT (default 33062),
#      SWEEPER_SLURM_DEV2_SUBNET (first three octets of a free private /24, default 10.231.7),
#      SWEEPER_SLURM_DEV2_SLURMD_TIMEOUT (seconds before a silent node is DOWN, default 10).
# See slurm/README.md and /work/shared/notes/slurm-dev-cluster.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODE="${2:-single}"
case "$MODE" in
  single|dev) MODE=single ;;
  dev2) ;;
  *) echo "[dev-cluster] ERROR: unknown cluster '$MODE' (expected dev2, or nothing for the single-node cluster)" >&2
     exit 2 ;;
esac
if [ "$MODE" = single ]; then
STATE="${SWEEPER_SLURM_DIR:-/tmp/sweeper-slurm}"
DBPORT="${SWEEPER_SLURM_DB_PORT:-33061}"
CLUSTER=sweeper
else
STATE="${SWEEPER_SLURM_DEV2_DIR:-/tmp/sweeper-slurm-dev2}"
DBPORT="${SWEEPER_SLURM_DEV2_DB_PORT:-33062}"
CLUSTER=sweeperdev2
SUBNET="${SWEEPER_SLURM_DEV2_SUBNET:-10.231.7}"
SLURMD_TIMEOUT="${SWEEPER_SLURM_DEV2_SLURMD_TIMEOUT:-10}"
CTLPORT=6827; SLURMDPORT=6828; DBDPORT=6829
NODES=(dev2n1 dev2n2)     # node i: netns sweeper-<node>, IP $SUBNET.(10+i), interface $IFNAME inside
BRIDGE=swdev2br           # in the root namespace, address $SUBNET.1 (slurmctld listens there)
IFNAME=dev2eth            # the same name in every node namespace (GLOO_SOCKET_IFNAME=dev2eth in conf/cluster/dev2.yaml)
fi
NGPUS="${SWEEPER_SLURM_GPUS:-4}"
START_TIMEOUT="${SWEEPER_SLURM_START_TIMEOUT:-90}"
DBPASS=sweeper-dev
PACKAGES=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge
          slurmdbd slurm-wlm-mysql-plugin mariadb-server)

RUN="$STATE/run"
LOG="$STATE/log"
MUNGE_SOCK="$STATE/munge/munge.socket"
MYSQL_SOCK="$STATE/mysql.sock"
export SLURM_CONF="$STATE/etc/slurm.conf"

log() { echo "[dev-cluster] $*" >&2; }
die() { echo "[dev-cluster] ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- install
missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

cmd_install() {
  local missing
  missing="$(missing_packages)"
  [ -z "$missing" ] && return 0
  [ "$(id -u)" = 0 ] || die "install needs root (missing: $(echo $missing))"
  log "installing: $(echo $missing)"
  # Keep postinst scripts from starting system-wide munge/mariadb/slurm services.
  local own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  local rc=0
  # shellcheck disable=SC2086
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >"/tmp/sweeper-slurm-apt.log" 2>&1; then
    log "apt-get install failed; running apt-get update and retrying"
    apt-get update -qq >>"/tmp/sweeper-slurm-apt.log" 2>&1 || true
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >>"/tmp/sweeper-slurm-apt.log" 2>&1 || rc=$?
  fi
  [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  if [ "$rc" != 0 ]; then tail -n 30 /tmp/sweeper-slurm-apt.log >&2; die "apt-get install failed (log: /tmp/sweeper-slurm-apt.log)"; fi
  [ -z "$(missing_packages)" ] || die "still missing after install: $(echo $(missing_packages))"
}

# ---------------------------------------------------------------- pid helpers
# pid_alive NAME COMM: the PID in $RUN/NAME.pid is running and its command name is COMM.
pid_of() { local f="$RUN/$1.pid"; [ -s "$f" ] && tr -dc '0-9' < "$f" || true; }
pid_alive() {
  local pid; pid="$(pid_of "$1")"
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
  local secs="$1" what="$2"; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || { log "timed out after ${secs}s waiting for $what"; return 1; }
    sleep 0.2
  done
}

show_logs() {
  local f
  for f in "$LOG"/*.log; do
    [ -e "$f" ] || continue
    echo "----- tail of $f -----" >&2
    tail -n 25 "$f" >&2
  done
}

fail_start() { log "start FAILED: $*"; show_logs; exit 1; }

# ---------------------------------------------------------------- configuration
render() { # render TEMPLATE DEST
  sed -e "s|@STATE@|$STATE|g" -e "s|@HOST@|$HOST|g" -e "s|@CLUSTER@|$CLUSTER|g" \
      -e "s|@NGPUS@|$NGPUS|g" -e "s|@LASTGPU@|$((NGPUS - 1))|g" -e "s|@DBPORT@|$DBPORT|g" \
      -e "s|@DBPASS@|$DBPASS|g" -e "s|@NODELINE@|$NODELINE|g" "$HERE/$1" > "$2"
}

write_configs() {
  HOST="$(hostname -s)"
  # Real CPUs/sockets/cores from slurmd -C; RealMemory a bit below the real total (else the node drains).
  local c mem
  c="$(slurmd -C 2>/dev/null | head -n 1)"
  [ -n "$c" ] || die "slurmd -C printed nothing"
  mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$c")"
  [ -n "$mem" ] || mem="$(free -m | awk '/^Mem:/{print $2}')"
  mem=$((mem - mem / 50 - 256))
  NODELINE="$(sed -e "s/^NodeName=[^ ]*/NodeName=$HOST/" -e "s/ *RealMemory=[0-9]*//" -e 's/ *UpTime=.*//' <<<"$c") RealMemory=$mem"
  mkdir -p "$STATE/etc" "$STATE/dev" "$STATE/ctld" "$STATE/slurmd" "$RUN" "$LOG"
  render slurm.conf.in "$STATE/etc/slurm.conf"
  render gres.conf.in "$STATE/etc/gres.conf"
  render cgroup.conf.in "$STATE/etc/cgroup.conf"
  render slurmdbd.conf.in "$STATE/etc/slurmdbd.conf"
  chmod 600 "$STATE/etc/slurmdbd.conf"
  chmod 644 "$STATE/etc/slurm.conf" "$STATE/etc/gres.conf" "$STATE/etc/cgroup.conf"
  # Fake GPU devices: clones of /dev/null (a regular file would leave CUDA_VISIBLE_DEVICES empty).
  local i
  for ((i = 0; i < NGPUS; i++)); do
    [ -c "$STATE/dev/gpu$i" ] || { rm -f "$STATE/dev/gpu$i"; mknod -m 666 "$STATE/dev/gpu$i" c 1 3; }
  done
}

# ---------------------------------------------------------------- daemons
start_munge() {
  pid_alive munged munged && return 0
  install -d -m 0755 -o munge -g munge "$STATE/munge"
  if [ ! -s "$STATE/munge/munge.key" ]; then
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  fi
  chown munge:munge "$STATE/munge/munge.key"; chmod 0400 "$STATE/munge/munge.key"
  touch "$LOG/munged.log"; chown munge:munge "$LOG/munged.log"
  install -d -m 0755 -o munge -g munge "$RUN/munge"
  rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
  runuser -u munge -- munged --socket="$MUNGE_SOCK" --key-file="$STATE/munge/munge.key" \
    --pid-file="$RUN/munge/munged.pid" --log-file="$LOG/munged.log" --seed-file="$STATE/munge/munged.seed" \
    || fail_start "munged did not start"
  wait_for 10 "munged pid file" test -s "$RUN/munge/munged.pid" || fail_start "munged wrote no PID file"
  ln -sf munge/munged.pid "$RUN/munged.pid"
  wait_for 10 munge bash -c "munge -S '$MUNGE_SOCK' -n </dev/null | unmunge -S '$MUNGE_SOCK'" \
    || fail_start "munge round trip fails"
}

start_mariadb() {
  pid_alive mariadbd mariadbd && return 0
  local datadir="$STATE/mysql"
  if [ ! -d "$datadir/mysql" ]; then
    mkdir -p "$datadir"
    mariadb-install-db --no-defaults --user=root --datadir="$datadir" --auth-root-authentication-method=socket \
      --skip-test-db >"$LOG/mariadb-install.log" 2>&1 || fail_start "mariadb-install-db failed (see $LOG/mariadb-install.log)"
  fi
  rm -f "$MYSQL_SOCK"
  setsid mariadbd --no-defaults --user=root --datadir="$datadir" --socket="$MYSQL_SOCK" \
    --port="$DBPORT" --bind-address=127.0.0.1 --pid-file="$RUN/mariadbd.pid" --log-error="$LOG/mariadb.log" \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
    --max-allowed-packet=64M </dev/null >>"$LOG/mariadb.log" 2>&1 &
  wait_for 60 MariaDB mariadb-admin --no-defaults --socket="$MYSQL_SOCK" -u root ping || fail_start "MariaDB not answering"
  wait_for 10 "MariaDB pid file" test -s "$RUN/mariadbd.pid" || fail_start "MariaDB wrote no PID file"
  mariadb --no-defaults --socket="$MYSQL_SOCK" -u root <<SQL || fail_start "could not create the slurm DB user"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

start_slurmdbd() {
  if ! pid_alive slurmdbd slurmdbd; then  # reads slurmdbd.conf next to $SLURM_CONF
    slurmdbd </dev/null >>"$LOG/slurmdbd.log" 2>&1 || fail_start "slurmdbd did not start"
  fi
  wait_for 60 slurmdbd sacctmgr -n show cluster || fail_start "slurmdbd not answering"
  if ! sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null || fail_start "sacctmgr add cluster failed"
  fi
}

start_slurmctld() {
  pid_alive slurmctld slurmctld && return 0
  slurmctld -f "$SLURM_CONF" </dev/null >>"$LOG/slurmctld.log" 2>&1 || fail_start "slurmctld did not start"
  wait_for 30 slurmctld scontrol ping || fail_start "slurmctld not answering"
}

start_slurmd() {
  pid_alive slurmd slurmd && return 0
  slurmd -f "$SLURM_CONF" </dev/null >>"$LOG/slurmd.log" 2>&1 || fail_start "slurmd did not start"
}

node_state() { sinfo -h -N -n "$(hostname -s)" -o '%t' 2>/dev/null | head -n 1; }
node_ready() { case "$(node_state)" in idle|mix|mixed|alloc|allocated) return 0 ;; *) return 1 ;; esac; }

cmd_start() {
  local t0=$SECONDS
  [ "$(id -u)" = 0 ] || die "start needs root"
  cmd_install
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  start_slurmd
  local deadline=$((SECONDS + START_TIMEOUT)) st
  while ! node_ready; do
    st="$(node_state)"
    case "$st" in
      drain*|drng|down*|fail*) # recover a node left down/drained by an earlier run
        scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true ;;
    esac
    [ "$SECONDS" -lt "$deadline" ] || { sinfo -N -l >&2 || true; scontrol show node >&2 || true
      fail_start "node not idle after ${START_TIMEOUT}s (state: ${st:-none})"; }
    sleep 0.3
  done
  log "cluster up in $((SECONDS - t0))s; state dir $STATE"
  sinfo >&2
  echo "export SLURM_CONF=$SLURM_CONF"
}

# stop_daemons NAME:COMM...: SIGTERM each PID from its PID file (only if its command name matches), wait for all
# of them (up to 30 s), then SIGKILL what is left. Daemons in one call stop in parallel.
stop_daemons() {
  local spec name comm pid i j pending
  local -a pids=() comms=() names=()
  for spec in "$@"; do
    name="${spec%%:*}"; comm="${spec#*:}"
    if pid_alive "$name" "$comm"; then
      pid="$(pid_of "$name")"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); comms+=("$comm"); names+=("$name")
    fi
    rm -f "$RUN/$name.pid"
  done
  for ((i = 0; i < 300; i++)); do   # up to 30 s
    pending=0
    for ((j = 0; j < ${#pids[@]}; j++)); do
      [ "$(cat "/proc/${pids[j]}/comm" 2>/dev/null)" = "${comms[j]}" ] && pending=1
    done
    [ "$pending" = 0 ] && return 0
    sleep 0.1
  done
  for ((j = 0; j < ${#pids[@]}; j++)); do
    if [ "$(cat "/proc/${pids[j]}/comm" 2>/dev/null)" = "${comms[j]}" ]; then
      log "${names[j]} (pid ${pids[j]}) ignored SIGTERM for 30 s; sending SIGKILL"
      kill -KILL "${pids[j]}" 2>/dev/null || true
    fi
  done
  sleep 0.5
}

cmd_stop() {
  local t0=$SECONDS
  if [ -f "$SLURM_CONF" ] && pid_alive slurmctld slurmctld; then
    # Cancel remaining jobs so no slurmstepd/job processes outlive the cluster.
    if [ -n "$(squeue -h -o %i 2>/dev/null | head -n 1)" ]; then
      log "cancelling remaining jobs"
      scancel --full --user="$(id -un)" 2>/dev/null || true
      wait_for 20 "jobs to end" bash -c '[ -z "$(squeue -h -o %i)" ]' || true
    fi
  fi
  # slurmctld flushes accounting to slurmdbd on exit; slurmdbd needs MariaDB and munged.
  stop_daemons slurmd:slurmd slurmctld:slurmctld
  stop_daemons slurmdbd:slurmdbd
  stop_daemons mariadbd:mariadbd munged:munged
  rm -f "$RUN/munge/munged.pid"
  log "stopped in $((SECONDS - t0))s"
}

cmd_status() {
  local name comm rc=0
  for name in munged:munged mariadbd:mariadbd slurmdbd:slurmdbd slurmctld:slurmctld slurmd:slurmd; do
    comm="${name#*:}"; name="${name%%:*}"
    if pid_alive "$name" "$comm"; then echo "$name: running (pid $(pid_of "$name"))"
    else echo "$name: not running"; rc=1; fi
  done
  echo "SLURM_CONF=$SLURM_CONF"
  if [ "$rc" = 0 ]; then sinfo || rc=1; fi
  return "$rc"
}

# ================================================================ two-host cluster (dev2)
# Layout (SUBNET=10.231.7 by default):
#   root netns:  bridge $BRIDGE $SUBNET.1/24 -- slurmctld (port 6827), slurmdbd (6829, 127.0.0.1), MariaDB, munged
#   netns sweeper-dev2n1: $IFNAME $SUBNET.11/24, UTS hostname dev2n1 -- slurmd (port 6828) and the jobs it starts
#   netns sweeper-dev2n2: $IFNAME $SUBNET.12/24, UTS hostname dev2n2 -- slurmd (port 6828) and the jobs it starts
# slurmd starts through `nsenter --net` (not `ip netns exec`, which remounts /sys without /sys/fs/cgroup, and
# slurmd 22.05 then fails: "No filesystem mounted on /sys/fs/cgroup") and `unshare --uts --mount`: its own hostname,
# and <state>/etc/hosts bind-mounted over /etc/hosts in its private mount namespace only, so the node names resolve
# to their namespace IPs for slurmd and its jobs; the machine's /etc/hosts is not touched.
node_ns() { echo "sweeper-$1"; }
node_ip() { local i; for i in "${!NODES[@]}"; do [ "${NODES[i]}" = "$1" ] && { echo "$SUBNET.$((11 + i))"; return 0; }; done; return 1; }
node_veth() { local i; for i in "${!NODES[@]}"; do [ "${NODES[i]}" = "$1" ] && { echo "swdev2v$((i + 1))"; return 0; }; done; return 1; }
ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# The subnet must be free: no route of this machine may cover $SUBNET.0/24 except our own bridge's.
dev2_check_subnet() {
  local other
  other="$(ip -4 route show 2>/dev/null | grep -v " dev $BRIDGE " | awk -v s="$SUBNET." 'index($1, s) == 1 {print}')" || true
  [ -z "$other" ] || die "subnet $SUBNET.0/24 is already routed here ($other); set SWEEPER_SLURM_DEV2_SUBNET"
  ip -4 addr show 2>/dev/null | grep -v " $BRIDGE\$" | grep -q "inet $SUBNET\." \
    && die "an address in $SUBNET.0/24 exists outside $BRIDGE; set SWEEPER_SLURM_DEV2_SUBNET"
  return 0
}

dev2_net_up() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    dev2_check_subnet
    ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE"
    ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  local node ns ip veth
  for node in "${NODES[@]}"; do
    ns="$(node_ns "$node")"; ip="$(node_ip "$node")"; veth="$(node_veth "$node")"
    ns_exists "$ns" || ip netns add "$ns" || die "ip netns add $ns failed"
    if ! ip netns exec "$ns" ip link show "$IFNAME" >/dev/null 2>&1; then
      ip link del "$veth" >/dev/null 2>&1 || true
      ip link add "$veth" type veth peer name "${veth}p" || die "cannot create veth $veth"
      ip link set "${veth}p" netns "$ns"
      ip netns exec "$ns" ip link set "${veth}p" name "$IFNAME"
      ip netns exec "$ns" ip addr add "$ip/24" dev "$IFNAME"
    fi
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link set "$IFNAME" up
  done
  {
    echo "127.0.0.1 localhost"
    echo "$SUBNET.1 $HOST"
    local n; for n in "${NODES[@]}"; do echo "$(node_ip "$n") $n"; done
  } > "$STATE/etc/hosts"
  chmod 644 "$STATE/etc/hosts"
}

dev2_net_down() {
  local node ns veth
  for node in "${NODES[@]}"; do
    ns="$(node_ns "$node")"; veth="$(node_veth "$node")"
    ns_exists "$ns" && ip netns del "$ns" 2>/dev/null || true
    ip link del "$veth" >/dev/null 2>&1 || true
  done
  ip link del "$BRIDGE" >/dev/null 2>&1 || true
}

dev2_write_configs() {
  HOST="$(hostname -s)"
  local c hw mem n lines="" i
  c="$(slurmd -C 2>/dev/null | head -n 1)"
  [ -n "$c" ] || die "slurmd -C printed nothing"
  mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$c")"
  [ -n "$mem" ] || mem="$(free -m | awk '/^Mem:/{print $2}')"
  mem=$(((mem - mem / 50 - 256) / ${#NODES[@]}))
  hw="$(sed -e 's/^NodeName=[^ ]* *//' -e "s/ *RealMemory=[0-9]*//" -e 's/ *UpTime=.*//' <<<"$c")"
  for ((i = 0; i < ${#NODES[@]}; i++)); do
    n="${NODES[i]}"
    lines+="NodeName=$n NodeAddr=$(node_ip "$n") NodeHostname=$n $hw RealMemory=$mem State=UNKNOWN"$'\n'
  done
  mkdir -p "$STATE/etc" "$STATE/ctld" "$RUN" "$LOG"
  for n in "${NODES[@]}"; do mkdir -p "$STATE/slurmd.$n"; done
  local nodelist; nodelist="$(IFS=,; echo "${NODES[*]}")"
  sed -e "s|@STATE@|$STATE|g" -e "s|@HOST@|$HOST|g" -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@CTLADDR@|$SUBNET.1|g" \
      -e "s|@CTLPORT@|$CTLPORT|g" -e "s|@SLURMDPORT@|$SLURMDPORT|g" -e "s|@DBDPORT@|$DBDPORT|g" \
      -e "s|@SLURMDTIMEOUT@|$SLURMD_TIMEOUT|g" -e "s|@NODELIST@|$nodelist|g" \
      "$HERE/slurm-dev2.conf.in" | awk -v lines="$lines" '$0 == "@NODELINES@" {printf "%s", lines; next} {print}' \
      > "$STATE/etc/slurm.conf"
  sed -e "s|@STATE@|$STATE|g" -e "s|@DBDPORT@|$DBDPORT|g" -e "s|@DBPORT@|$DBPORT|g" -e "s|@DBPASS@|$DBPASS|g" \
      "$HERE/slurmdbd-dev2.conf.in" > "$STATE/etc/slurmdbd.conf"
  sed -e "s|@STATE@|$STATE|g" "$HERE/cgroup.conf.in" > "$STATE/etc/cgroup.conf"
  chmod 600 "$STATE/etc/slurmdbd.conf"
  chmod 644 "$STATE/etc/slurm.conf" "$STATE/etc/cgroup.conf"
}

# slurmd of NODE: in the node's network namespace and a new UTS namespace whose hostname is the node name.
dev2_start_slurmd() {
  local node="$1" ns
  ns="$(node_ns "$node")"
  pid_alive "slurmd.$node" slurmd && return 0
  nsenter --net="/run/netns/$ns" -- unshare --uts --mount --propagation private -- \
    /bin/sh -c 'mount --bind "$3" /etc/hosts && hostname "$1" && exec slurmd -f "$2"' sh "$node" "$SLURM_CONF" \
    "$STATE/etc/hosts" </dev/null >>"$LOG/slurmd.$node.start.log" 2>&1 || fail_start "slurmd of $node did not start"
  wait_for 10 "slurmd.$node pid file" pid_alive "slurmd.$node" slurmd || fail_start "slurmd of $node wrote no PID file"
}

dev2_node_state() { sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -n 1; }

dev2_start() {
  local t0=$SECONDS
  [ "$(id -u)" = 0 ] || die "start needs root (network namespaces)"
  cmd_install
  command -v unshare >/dev/null || die "unshare (util-linux) not found"
  dev2_write_configs
  dev2_net_up
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  local node st deadline=$((SECONDS + START_TIMEOUT)) ready
  for node in "${NODES[@]}"; do dev2_start_slurmd "$node"; done
  while :; do
    ready=1
    for node in "${NODES[@]}"; do
      st="$(dev2_node_state "$node")"
      case "$st" in
        idle|mix|mixed|alloc|allocated) ;;
        drain*|drng|down*|fail*) ready=0
          scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
        *) ready=0 ;;
      esac
    done
    [ "$ready" = 1 ] && break
    [ "$SECONDS" -lt "$deadline" ] || { sinfo -N -l >&2 || true; scontrol show node >&2 || true
      fail_start "nodes not idle after ${START_TIMEOUT}s"; }
    sleep 0.3
  done
  log "two-host cluster up in $((SECONDS - t0))s; state dir $STATE; controller $SUBNET.1:$CTLPORT"
  for node in "${NODES[@]}"; do log "  $node: netns $(node_ns "$node"), $IFNAME $(node_ip "$node")/24"; done
  sinfo -N >&2
  echo "export SLURM_CONF=$SLURM_CONF"
}

# Every process in NODE's network namespace (slurmd, slurmstepd, the job's ranks), by PID.
dev2_ns_pids() { ip netns pids "$(node_ns "$1")" 2>/dev/null || true; }

dev2_kill_node() {
  local node="$1" pids
  node_ip "$node" >/dev/null || die "unknown node '$node' (nodes: ${NODES[*]})"
  pids="$(dev2_ns_pids "$node")"
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi
  rm -f "$RUN/slurmd.$node.pid"
  log "killed $node: $(echo $pids | wc -w) process(es) of netns $(node_ns "$node")"
}

dev2_stop() {
  local t0=$SECONDS node pids
  if [ -f "$SLURM_CONF" ] && pid_alive slurmctld slurmctld; then
    if [ -n "$(squeue -h -o %i 2>/dev/null | head -n 1)" ]; then
      log "cancelling remaining jobs"
      scancel --full --user="$(id -un)" 2>/dev/null || true
      wait_for 20 "jobs to end" bash -c '[ -z "$(squeue -h -o %i)" ]' || true
    fi
  fi
  local -a specs=()
  for node in "${NODES[@]}"; do specs+=("slurmd.$node:slurmd"); done
  stop_daemons "${specs[@]}" slurmctld:slurmctld
  # whatever is left in the node namespaces (job processes) belongs to this cluster
  for node in "${NODES[@]}"; do
    pids="$(dev2_ns_pids "$node")"
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
  stop_daemons slurmdbd:slurmdbd
  stop_daemons mariadbd:mariadbd munged:munged
  rm -f "$RUN/munge/munged.pid"
  dev2_net_down
  log "stopped in $((SECONDS - t0))s"
}

dev2_status() {
  local name comm rc=0 node
  local -a names=(munged:munged mariadbd:mariadbd slurmdbd:slurmdbd slurmctld:slurmctld)
  for node in "${NODES[@]}"; do names+=("slurmd.$node:slurmd"); done
  for name in "${names[@]}"; do
    comm="${name#*:}"; name="${name%%:*}"
    if pid_alive "$name" "$comm"; then echo "$name: running (pid $(pid_of "$name"))"
    else echo "$name: not running"; rc=1; fi
  done
  for node in "${NODES[@]}"; do
    if ns_exists "$(node_ns "$node")"; then echo "$node: netns $(node_ns "$node") $IFNAME $(node_ip "$node")"
    else echo "$node: no netns"; rc=1; fi
  done
  echo "SLURM_CONF=$SLURM_CONF"
  if [ "$rc" = 0 ]; then sinfo -N || rc=1; fi
  return "$rc"
}

if [ "$MODE" = dev2 ]; then
  case "${1:-}" in
    install) cmd_install ;;
    start) dev2_start ;;
    stop) dev2_stop ;;
    status) dev2_status ;;
    restart) dev2_stop; dev2_start ;;
    kill-node) dev2_kill_node "${3:-}" ;;
    *) echo "usage: $0 {install|start|stop|status|restart|kill-node NODE} dev2" >&2; exit 2 ;;
  esac
  exit $?
fi

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart) cmd_stop; cmd_start ;;
  *) echo "usage: $0 {install|start|stop|status|restart}" >&2; exit 2 ;;
esac
