#!/usr/bin/env bash
# tests/multihost/run.sh: moed on three "hosts" built from network namespaces on this one
# machine (recipe: shared/notes/multihost-netns.md).
#
#   switch namespace: bridge br0, ports p1 p2 p3 (no address)
#   host namespaces:  eth0 (veth peer of pN) with 198.51.100.2-4/24 (or another free /24),
#                     lo up, no default route; each process started there gets its own host
#                     name h1-PID, h2-PID, h3-PID via `unshare --uts`.
#
# mpirun runs in h1's namespace and starts orted in h2 and h3 through agent.sh (Open MPI's
# plm_rsh_agent, in place of ssh); ranks talk over TCP on the test subnet only (btl tcp,self).
# Checks: (1) the 3-host output equals the single-rank output (st_diff --tol 1e-4);
# (2) with the profiler on, summary.json names three distinct hosts (our three) and shows
# bytes between ranks on different hosts.
#
# Nothing is added to the machine's own namespace: veth pairs are created directly between
# the switch and host namespaces, and everything is deleted by a trap on any exit. Names
# carry this shell's PID, so parallel runs never collide. Needs root; exits 77 with one
# "SKIP: reason" line when namespaces cannot be made. Expects MOED and ST_DIFF (ctest sets
# them to the built binaries).
set -euo pipefail -o errtrace
export LC_ALL=C

# The test's own stdout/stderr, kept on fds 8 and 9 so that SKIP/FAIL lines reach ctest
# even when a signal arrives while a step's output is redirected to a log file.
exec 8>&1 9>&2
SAID=0        # a SKIP or FAIL line has been printed
ERR_AT=""     # the last command that failed, for a FAIL line if set -e stops the script
trap 'ERR_AT="line $LINENO: $BASH_COMMAND"' ERR
skip() { SAID=1; echo "SKIP: $*" >&8; exit 77; }
fail() { SAID=1; echo "FAIL: $*" >&9; exit 1; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# --- names unique to this run -------------------------------------------------------------
ID=$$
PFX="moedmh$ID-"                  # every namespace of this run starts with this
NS_SW="${PFX}sw"
NS=("${PFX}h1" "${PFX}h2" "${PFX}h3")
HN=("h1-$ID" "h2-$ID" "h3-$ID")   # host names (UTS), short and distinct per run

WORK=""                           # the work dir, once made
MADE=0                            # set once we start creating namespaces
BG=0                              # the bounded command now running, if any

# Delete namespaces NAME...: kill what still runs inside (only processes this test started:
# nothing else can live in a namespace we just made), then remove the namespace.
del_ns() {
  local ns pids
  for ns in "$@"; do
    pids=$(ip netns pids "$ns" 2> /dev/null || true)
    if [[ -n "$pids" ]]; then
      # shellcheck disable=SC2086
      kill -KILL $pids 2> /dev/null || true
    fi
    ip netns del "$ns" 2> /dev/null || true
  done
}
our_ns() { ip netns list 2> /dev/null | awk -v p="$1" 'index($1, p) == 1 { print $1 }'; }

teardown() {
  local rc=$?
  trap - EXIT INT TERM HUP ERR
  set +e
  if (( rc != 0 && ! SAID )); then
    echo "FAIL: unexpected error at ${ERR_AT:-an unknown place} (exit $rc)" >&9
  fi
  if (( rc != 0 && rc != 77 )); then rc=1; fi
  if (( BG )); then
    kill -TERM "$BG" 2> /dev/null   # timeout passes it on to mpirun / moed
    sleep 1
  fi
  if (( MADE )); then
    # shellcheck disable=SC2046
    del_ns $(our_ns "$PFX")
    if [[ -n "$(our_ns "$PFX")" ]]; then
      echo "WARN: could not delete namespaces: $(our_ns "$PFX" | tr '\n' ' ')" >&9
    fi
  fi
  cd /
  if [[ -n "$WORK" ]]; then rm -rf "$WORK"; fi
  exit "$rc"
}
trap teardown EXIT
trap 'fail "interrupted (SIGINT)"' INT
trap 'fail "terminated (SIGTERM)"' TERM
trap 'fail "hung up (SIGHUP)"' HUP

# --- prerequisites (a missing one means this machine cannot run the test: skip) ---------
[[ $(id -u) == 0 ]] || skip "not root (network namespaces need root)"
for tool in ip unshare mpirun timeout hostname python3; do
  command -v "$tool" > /dev/null 2>&1 || skip "no '$tool' on PATH"
done
# The binaries under test must be given: a missing one is a broken build, not a skip.
[[ -n "${MOED:-}" && -x "${MOED}" ]] || fail "MOED='${MOED:-}' is not an executable (set MOED to build/moed)"
[[ -n "${ST_DIFF:-}" && -x "${ST_DIFF}" ]] || fail "ST_DIFF='${ST_DIFF:-}' is not an executable (set ST_DIFF to build/tests/st_diff)"
MOED=$(realpath "$MOED")
ST_DIFF=$(realpath "$ST_DIFF")
[[ -r "$HERE/agent.sh" ]] || fail "agent.sh not found next to $0"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

TMPBASE=${TMPDIR:-/tmp}
WORK=$(mktemp -d "$TMPBASE/moed-mh.$ID.XXXXXX")
cd "$WORK"
cp "$HERE/agent.sh" "$WORK/agent.sh"   # our own executable copy, whatever the checkout's modes
chmod 755 "$WORK/agent.sh"

# Leftovers of earlier runs of this test that were killed before their trap ran (SIGKILL,
# e.g. by ctest's timeout): namespaces with this test's prefix whose owner shell is gone and
# that hold no process, and their work dirs. Only names of the form moedmh<PID>-... and
# moed-mh.<PID>.* are ever touched.
dead() { [[ "$1" =~ ^[0-9]+$ && "$1" != "$ID" ]] && ! kill -0 "$1" 2> /dev/null; }
for d in "$TMPBASE"/moed-mh.[0-9]*.*; do
  [[ -d "$d" ]] || continue
  owner=${d##*/moed-mh.}
  owner=${owner%%.*}
  if dead "$owner"; then rm -rf "$d"; fi
done
while read -r ns; do
  [[ -n "$ns" ]] || continue
  owner=${ns#moedmh}
  owner=${owner%%-*}
  [[ "$owner" =~ ^[0-9]+$ ]] || continue
  if [[ "$owner" == "$ID" ]] || { dead "$owner" && [[ -z "$(ip netns pids "$ns" 2> /dev/null)" ]]; }; then
    del_ns "$ns"
  fi
done < <(our_ns moedmh)

# --- a subnet the machine does not use ---------------------------------------------------
NET_PREFIX=$(python3 - "$(ip -4 route show table all 2> /dev/null; ip -4 -o addr show 2> /dev/null)" << 'EOPY'
import ipaddress, re, sys
used = []
for tok in re.findall(r'\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b', sys.argv[1]):
    try:
        net = ipaddress.ip_network(tok, strict=False)
    except ValueError:
        continue
    if net.prefixlen > 0:          # the default route overlaps everything; ignore it
        used.append(net)
for cand in ("198.51.100", "203.0.113", "198.18.251", "198.19.251", "10.251.97"):
    net = ipaddress.ip_network(cand + ".0/24")
    if not any(net.overlaps(u) for u in used):
        print(cand)
        break
EOPY
) || fail "python3 could not choose a subnet"
[[ -n "$NET_PREFIX" ]] || skip "every candidate test subnet is already used on this machine"
NET="$NET_PREFIX.0/24"
ADDR=("$NET_PREFIX.2" "$NET_PREFIX.3" "$NET_PREFIX.4")

# The machine's own namespace, to prove afterwards that we changed nothing in it.
root_state() { ip -o link show | awk -F': ' '{print $2}' | sort; ip -4 route show; ip -4 -o addr show | awk '{print $2, $4}'; }
ROOT_BEFORE=$(root_state)

# --- build the network --------------------------------------------------------------------
# ip_ok WHAT CMD...: run an ip command; on failure FAIL with its message.
ip_ok() {
  local what=$1; shift
  "$@" 2> "$WORK/ip.err" || fail "$what: '$*': $(tr '\n' ' ' < "$WORK/ip.err")"
}
# ip_or_skip REASON CMD...: like ip_ok, but a failure means the kernel lacks the feature.
ip_or_skip() {
  local why=$1; shift
  "$@" 2> "$WORK/ip.err" || skip "$why ($(head -n1 "$WORK/ip.err"))"
}

MADE=1
ip_or_skip "cannot create network namespaces: ip netns add failed" ip netns add "$NS_SW"
for ns in "${NS[@]}"; do ip_ok "ip netns add" ip netns add "$ns"; done
# shellcheck disable=SC2016  # "$1" belongs to the inner shell
ip_or_skip "unshare --uts does not work inside a network namespace" \
  ip netns exec "${NS[0]}" unshare --uts sh -c 'hostname "$1"' sh "${HN[0]}"
ip_ok "switch lo" ip -n "$NS_SW" link set lo up
ip_or_skip "no bridge support in this kernel" \
  ip -n "$NS_SW" link add br0 type bridge forward_delay 0 stp_state 0
ip_ok "bridge up" ip -n "$NS_SW" link set br0 up
for i in 0 1 2; do
  p="p$((i + 1))"
  # Both ends are created inside namespaces: the machine's own namespace never sees them.
  ip_or_skip "no veth support in this kernel" \
    ip -n "$NS_SW" link add "$p" type veth peer name eth0 netns "${NS[i]}"
  ip_ok "bridge port $p" ip -n "$NS_SW" link set "$p" master br0
  ip_ok "port $p up" ip -n "$NS_SW" link set "$p" up
  ip_ok "lo in ${NS[i]}" ip -n "${NS[i]}" link set lo up
  ip_ok "address in ${NS[i]}" ip -n "${NS[i]}" addr add "${ADDR[i]}/24" dev eth0
  ip_ok "eth0 up in ${NS[i]}" ip -n "${NS[i]}" link set eth0 up
done
# Hosts only know their /24: no default route, so no packet can be sent anywhere else.
for ns in "${NS[@]}"; do
  if [[ -n "$(ip -n "$ns" route show default)" ]]; then fail "$ns has a default route"; fi
done

# Address -> namespace -> host name, for agent.sh; and the hostfile, one slot per host.
: > hosts.map
: > hostfile
for i in 0 1 2; do
  echo "${ADDR[i]} ${NS[i]} ${HN[i]}" >> hosts.map
  echo "${ADDR[i]} slots=1" >> hostfile
done
export MOED_MH_MAP="$WORK/hosts.map" MOED_MH_LOG="$WORK/agent.log"
# Open MPI's session directories (and PMIx rendezvous files) go under the work dir, so
# nothing of this run is left in /tmp even if a daemon is killed.
mkdir -p "$WORK/t"
export TMPDIR="$WORK/t"

# bounded SECONDS CMD...: CMD under timeout, waited for in the background so that a signal
# to this script is acted on at once (bash defers traps while a foreground child runs).
# No step may run past DEADLINE seconds of the whole test, so the test ends (and tears down)
# well inside ctest's TIMEOUT 300 even if every step is slow.
DEADLINE=240
bounded() {
  local limit=$1 rc=0
  shift
  if (( limit > DEADLINE - SECONDS )); then limit=$(( DEADLINE - SECONDS )); fi
  (( limit > 0 )) || return 124
  timeout -k 5 "$limit" "$@" 8>&- 9>&- &
  BG=$!
  wait "$BG" || rc=$?
  BG=0
  return "$rc"
}

# IN_H1 CMD...: run CMD in h1's namespace with h1's host name (the head node).
# shellcheck disable=SC2016  # "$1" and "$@" belong to the inner shell
IN_H1=(ip netns exec "${NS[0]}" unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' sh "${HN[0]}")
# shellcheck disable=SC2054  # "tcp,self" is one word
MPI_FLAGS=(--hostfile "$WORK/hostfile" -np 3 --map-by node
           --mca plm_rsh_agent "$WORK/agent.sh" --mca plm_rsh_no_tree_spawn 1
           --mca oob_tcp_if_include "$NET" --mca btl_tcp_if_include "$NET"
           --mca btl tcp,self --mca pml ob1 --mca osc '^ucx'
           -x TMPDIR)
# on_three_hosts SECONDS CMD...: mpirun -np 3 over the three hosts, bounded in time.
on_three_hosts() {
  local limit=$1; shift
  bounded "$limit" "${IN_H1[@]}" mpirun "${MPI_FLAGS[@]}" "$@"
}

# --- 0. the launch works: one process per host, each with its host name -------------------
rc=0
on_three_hosts 30 hostname > launch.log 2>&1 || rc=$?
if (( rc != 0 )); then
  cat launch.log >&2
  (( rc == 124 || rc == 137 )) && fail "mpirun could not start on the three hosts: timed out (30 s)"
  fail "mpirun could not start on the three hosts (exit $rc)"
fi
got=$(grep -E '^[A-Za-z0-9.-]+$' launch.log | sort | tr '\n' ' ' || true)
want=$(printf '%s\n' "${HN[@]}" | sort | tr '\n' ' ')
[[ "$got" == "$want" ]] || { cat launch.log >&2; fail "launch ran on '$got', expected '$want'"; }
# h1 is the head node (mpirun is there); the daemons of h2 and h3 came through agent.sh.
for i in 1 2; do
  grep -q "^${ADDR[i]} ${NS[i]} ${HN[i]}: " agent.log 2> /dev/null \
    || { cat launch.log agent.log >&2 || true; fail "no daemon was launched on ${HN[i]} through agent.sh"; }
done
echo "hosts: ${HN[*]} (${ADDR[*]} on $NET, namespaces ${PFX}*)"

# --- the model -----------------------------------------------------------------------------
# config PROFILER(true|false)
config() {
  cat << EOC
model:
  hidden_dim: 128
  ffn_dim: 256
  num_experts: 8
  top_k: 2
  num_layers: 2
  activation: swiglu
  normalize_topk: true
  capacity_factor: 0
  weights: random
  seed: 7
placement:
  master_rank: 0
  experts: auto
runtime:
  routing: symmetric
workload:
  tokens_per_step: 96
  steps: 3
  input: random
profiler:
  enabled: $1
  warmup_steps: 0
  measurement_steps: 3
  trace: false
  output_dir: $WORK/experiments
EOC
}
config false > c.yaml
config true > p.yaml

# --- 1. three hosts give the single-rank output ---------------------------------------------
# The single rank runs in h1's namespace too, so even its MPI singleton stays off the
# machine's own interfaces.
rc=0
bounded 60 "${IN_H1[@]}" "$MOED" --config c.yaml --dump-output one.safetensors \
  --no-progress > one.log 2>&1 || rc=$?
(( rc == 0 )) || { cat one.log >&2; fail "single-rank run failed (exit $rc)"; }
rc=0
on_three_hosts 120 "$MOED" --config c.yaml --dump-output many.safetensors --no-progress \
  > many.log 2>&1 || rc=$?
if (( rc != 0 )); then
  cat many.log >&2
  (( rc == 124 || rc == 137 )) && fail "3-host run timed out (120 s; test deadline ${DEADLINE} s)"
  fail "3-host run failed (exit $rc)"
fi
grep -q 'tokens/s: [0-9]' many.log || { cat many.log >&2; fail "3-host run printed no tokens/s line"; }
"$ST_DIFF" one.safetensors many.safetensors --tol 1e-4 > diff.log 2>&1 \
  || { cat diff.log >&2; fail "3-host output differs from the single-rank output"; }
echo "output: 3 hosts == 1 rank ($(tr '\n' ' ' < diff.log))"

# --- 2. the profiler sees three hosts and traffic between them --------------------------------
rc=0
on_three_hosts 120 "$MOED" --config p.yaml --no-progress > prof.log 2>&1 || rc=$?
if (( rc != 0 )); then
  cat prof.log >&2
  (( rc == 124 || rc == 137 )) && fail "profiled 3-host run timed out (120 s; test deadline ${DEADLINE} s)"
  fail "profiled 3-host run failed (exit $rc)"
fi
shopt -s nullglob
sums=("$WORK"/experiments/*/summary.json)
shopt -u nullglob
(( ${#sums[@]} == 1 )) || { cat prof.log >&2; fail "expected one summary.json under experiments/, found ${#sums[@]}"; }
python3 - "${sums[0]}" "${HN[@]}" << 'EOPY' || fail "profiler report check failed"
import json, sys
path, want = sys.argv[1], sys.argv[2:]
s = json.load(open(path))
def bad(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)
if s.get("schema") != "moed.summary":
    bad("%s: schema is %r" % (path, s.get("schema")))
if s.get("partial"):
    bad("report is partial: %s" % s.get("missing"))
run, ranks, comm = s["run"], s["ranks"], s["comm"]
hosts = [r["host"] for r in ranks]
print("profiler: world_size %d, num_hosts %d, hosts by rank %s"
      % (run["world_size"], run["num_hosts"], hosts))
if run["world_size"] != 3 or len(ranks) != 3:
    bad("world_size %d, %d ranks in the report; expected 3" % (run["world_size"], len(ranks)))
if run["num_hosts"] != 3 or len(set(hosts)) != 3:
    bad("num_hosts %d, distinct hosts %s; expected 3" % (run["num_hosts"], sorted(set(hosts))))
if sorted(hosts) != sorted(want):
    bad("hosts %s are not the test's hosts %s" % (sorted(hosts), sorted(want)))
b = comm["bytes"]
print("comm bytes (row = sender, column = receiver; recorded steps %d):" % run["recorded_steps"])
for i, row in enumerate(b):
    print("  rank %d (%s): %s" % (i, hosts[i], " ".join("%8d" % v for v in row)))
cross = {(i, j): b[i][j] for i in range(3) for j in range(3) if i != j and hosts[i] != hosts[j]}
total = sum(cross.values())
print("cross-host bytes: %d in %d of %d host pairs" % (total, sum(1 for v in cross.values() if v > 0), len(cross)))
if total <= 0:
    bad("no bytes between ranks on different hosts")
EOPY

# --- the machine's own namespace is as we found it -----------------------------------------
[[ "$(root_state)" == "$ROOT_BEFORE" ]] || fail "the machine's own network namespace changed during the test"
echo "PASS multihost.three_hosts"
