#!/bin/bash
# What the jump pod itself costs on a real node, at the default size (500m, 1Gi), for sizing it
# and for what a crash refuses:
#  1. memory: the container's working set (what the kubelet counts: usage less inactive file
#     pages, from its memory cgroup) with no session, then with 10 and 40 SSH sessions open
#     through it (`ssh -J` to a job's pod, as dstack's users connect);
#  2. throughput: 1 GiB sent through the jump pod to the job's pod, with the jump pod's CPU time
#     and throttled CFS periods meanwhile;
#  3. a crash: the container's main process (the start script, which sshd's end ends too)
#     killed with SIGKILL three times, 60 s apart, while a new SSH connection is made through
#     the NodePort every 200 ms: from the kill to the first connection that succeeds again, and
#     how many failed. The kubelet restarts the first crash's container at once and backs off
#     before each later one (10 s, then doubling).
# Runs inside `jumppod-controlplane run --real-nodes 2` (`make bench-jump-pod`), as root: it
# reads the pod's cgroups on this machine. Prints one line per figure.
#
# usage: host/bench/jump-pod.sh JUMPPOD
set -euo pipefail
jumppod=$1
dir=${JUMPPOD_CLUSTER_DIR:?run inside jumppod-controlplane run --real-nodes 2}
export KUBECONFIG=$JUMPPOD_CLUSTER_KUBECONFIG
ready=$dir/ready.json
[ "$(jq -r '.real_nodes | type' "$ready")" = object ] || { echo "no real nodes in $ready" >&2; exit 1; }
image=$(jq -r .real_nodes.sshd_image "$ready")
label=$(jq -r .real_nodes.label "$ready")   # key=value
taint=$(jq -r .real_nodes.taint "$ready")   # key=value:Effect
taint_value=${taint#*=}
ns=bench-jump-pod
name=dstack-bench-ssh-jump-pod
work=$dir/bench-jump-pod
rm -rf "$work" && mkdir -p "$work"
sessions=()
cleanup() {
  for pid in "${sessions[@]}"; do kill "$pid" 2>/dev/null || true; done
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

ssh-keygen -q -t ed25519 -N '' -C bench -f "$work/id"
kubectl create namespace "$ns" >/dev/null
cat >"$work/config.yaml" <<EOF
namespace: $ns
project: bench
hostname: 127.0.0.1
image: $image
ssh_public_key: $(cat "$work/id.pub")
node_selector: {"${label%%=*}": "${label#*=}"}
tolerations:
- {key: "${taint%%=*}", operator: Equal, value: "${taint_value%%:*}", effect: "${taint##*:}"}
EOF
"$jumppod" ensure -f "$work/config.yaml" >/dev/null

# The job's pod: sshd with the same key, on a real node.
kubectl -n "$ns" apply -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job"},
 "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
  "nodeSelector": {"${label%%=*}": "${label#*=}"},
  "tolerations": [{"key": "${taint%%=*}", "operator": "Equal", "value": "${taint_value%%:*}", "effect": "${taint##*:}"}],
  "containers": [{"name": "job", "image": "$image", "env": [{"name": "KEY", "value": "$(cat "$work/id.pub")"}],
   "command": ["/bin/sh", "-c", "set -e; rm -f /etc/ssh/ssh_host_*; ssh-keygen -A; mkdir -p /run/sshd /root/.ssh; printf '%s\\\\n' \"\$KEY\" > /root/.ssh/authorized_keys; chmod 600 /root/.ssh/authorized_keys; exec /usr/sbin/sshd -D -e -o PasswordAuthentication=no -o MaxSessions=100 -o MaxStartups=100"],
   "readinessProbe": {"tcpSocket": {"port": 22}, "periodSeconds": 1}}]}}
EOF
kubectl -n "$ns" wait --for=condition=Ready pod/job --timeout=180s >/dev/null
job_ip=$(kubectl -n "$ns" get pod job -o jsonpath='{.status.podIP}')

port=
for _ in $(seq 180); do
  if proxy=$("$jumppod" -o json resolve -f "$work/config.yaml" 2>/dev/null); then
    port=$(jq -r .proxy.port <<<"$proxy")
    break
  fi
  sleep 1
done
[ -n "$port" ] || { echo "the jump pod never got ready" >&2; exit 1; }

cat >"$work/ssh_config" <<EOF
Host jump
  HostName 127.0.0.1
  Port $port
Host job
  HostName $job_ip
Host *
  User root
  IdentityFile $work/id
  IdentitiesOnly yes
  BatchMode yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  ConnectTimeout 5
  LogLevel ERROR
EOF
through() { ssh -F "$work/ssh_config" -J jump job "$@"; }
for _ in $(seq 30); do through true 2>/dev/null && break; sleep 1; done
through true

# The jump pod's container's cgroup directory under CONTROLLER (memory, cpu).
cgroup() {
  local uid cid
  uid=$(kubectl -n "$ns" get pod -l "app.kubernetes.io/instance=$name" -o jsonpath='{.items[0].metadata.uid}')
  cid=$(kubectl -n "$ns" get pod -l "app.kubernetes.io/instance=$name" -o jsonpath='{.items[0].status.containerStatuses[0].containerID}')
  cid=${cid#containerd://}
  find -H "/sys/fs/cgroup/$1" -type d -path "*/pod$uid/$cid" -print -quit
}
memory=$(cgroup memory)
[ -n "$memory" ] || { echo "the jump pod's memory cgroup was not found" >&2; exit 1; }
working_set_mib() {
  local usage inactive
  usage=$(cat "$memory/memory.usage_in_bytes")
  inactive=$(awk '$1 == "total_inactive_file" {print $2}' "$memory/memory.stat")
  awk -v u="$usage" -v i="$inactive" 'BEGIN {printf "%.1f", (u - i) / 1048576}'
}

# 1. Memory.
sleep 5
ws0=$(working_set_mib)
echo "memory: working set with no session: $ws0 MiB"
open_sessions() {
  local target=$1 n
  while [ "${#sessions[@]}" -lt "$target" ]; do
    n=${#sessions[@]}
    through 'echo up; exec sleep 3600' >"$work/session-$n.out" 2>&1 &
    sessions+=($!)
    for _ in $(seq 100); do grep -q up "$work/session-$n.out" 2>/dev/null && break; sleep 0.1; done
    grep -q up "$work/session-$n.out" || { echo "session $n did not open: $(cat "$work/session-$n.out")" >&2; exit 1; }
  done
  sleep 5
}
for count in 10 40; do
  open_sessions "$count"
  ws=$(working_set_mib)
  echo "memory: working set with $count sessions: $ws MiB ($(awk -v a="$ws" -v b="$ws0" -v n="$count" 'BEGIN {printf "%.2f", (a - b) / n}') MiB a session)"
done
for pid in "${sessions[@]}"; do kill "$pid" 2>/dev/null || true; done
sessions=()

# 2. Throughput.
cpu=$(cgroup cpu)
usage0=$(cat "$cpu/cpuacct.usage" 2>/dev/null || cat "$(cgroup cpuacct)/cpuacct.usage")
read -r periods0 throttled0 < <(awk '$1 == "nr_periods" {p = $2} $1 == "nr_throttled" {t = $2} END {print p, t}' "$cpu/cpu.stat")
start=$(now_ms)
head -c 1073741824 /dev/zero | through 'cat > /dev/null'
took=$(( $(now_ms) - start ))
usage1=$(cat "$cpu/cpuacct.usage" 2>/dev/null || cat "$(cgroup cpuacct)/cpuacct.usage")
read -r periods1 throttled1 < <(awk '$1 == "nr_periods" {p = $2} $1 == "nr_throttled" {t = $2} END {print p, t}' "$cpu/cpu.stat")
awk -v ms="$took" -v cpu=$(( (usage1 - usage0) / 1000000 )) -v p=$(( periods1 - periods0 )) -v t=$(( throttled1 - throttled0 )) \
  'BEGIN {printf "throughput: 1 GiB through the jump pod in %.1f s: %.0f MiB/s; the jump pod used %.2f cores, throttled in %d of %d periods\n", ms / 1000, 1024 / (ms / 1000), cpu / ms, t, p}'

# 3. Crashes.
probe() {
  ssh -p "$port" -i "$work/id" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no \
    -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 -o LogLevel=QUIET root@127.0.0.1 true </dev/null
}
for crash in 1 2 3; do
  kubectl -n "$ns" wait --for=condition=Ready pod -l "app.kubernetes.io/instance=$name" --timeout=300s >/dev/null
  until probe; do sleep 0.2; done
  before=$(kubectl -n "$ns" get pod -l "app.kubernetes.io/instance=$name" -o jsonpath='{.items[0].status.containerStatuses[0].restartCount}')
  # The container's main process (the start script): the one whose parent is outside it.
  procs=$(cat "$(cgroup memory)/cgroup.procs")
  main=
  for pid in $procs; do
    parent=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null) || continue
    grep -qx "$parent" <<<"$procs" || main=$pid
  done
  [ -n "$main" ] || { echo "the jump pod's main process not found" >&2; exit 1; }
  killed=$(now_ms)
  kill -KILL "$main"
  failed=0 first_back=
  while [ $(( $(now_ms) - killed )) -lt 300000 ]; do
    tick=$(now_ms)
    if probe; then first_back=$(( $(now_ms) - killed )); break; fi
    failed=$(( failed + 1 ))
    rest=$(( 200 - ($(now_ms) - tick) ))
    [ "$rest" -le 0 ] || sleep "0.$(printf '%03d' "$rest")"
  done
  [ -n "$first_back" ] || { echo "crash $crash: no connection succeeded within 300 s" >&2; exit 1; }
  for _ in $(seq 30); do
    restarts=$(kubectl -n "$ns" get pod -l "app.kubernetes.io/instance=$name" -o jsonpath='{.items[0].status.containerStatuses[0].restartCount}')
    [ "$restarts" -gt "$before" ] && break
    sleep 1
  done
  [ "$restarts" -gt "$before" ] || { echo "crash $crash: the container did not restart" >&2; exit 1; }
  awk -v ms="$first_back" -v n="$failed" -v crash="$crash" -v r="$restarts" \
    'BEGIN {printf "crash %d: main process killed; a new connection succeeded again after %.1f s, %d attempts failed (restart count %d)\n", crash, ms / 1000, n, r}'
  [ "$crash" = 3 ] || sleep 60
done
