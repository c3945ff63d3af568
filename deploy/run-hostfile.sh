#!/usr/bin/env bash
# Runs moed over the nodes of an Open MPI hostfile. See --help.
set -euo pipefail
unset CDPATH # a cd would print its folder into the $(cd ... && pwd) below

prog=run-hostfile.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

usage() {
  cat <<EOF
usage: deploy/$prog [OPTIONS] HOSTFILE CONFIG [MOED_ARGS...] [-- MPIRUN_ARGS...]

OPTIONS (below) may come anywhere before '--'; other words after CONFIG are moed's.

Runs moed on the nodes of HOSTFILE (Open MPI syntax, one 'HOST slots=N' per line; see
deploy/hostfile.example) with CONFIG, and prints the mpirun line before running it.

  HOSTFILE        ranks fill the slots in file order, but the node mpirun runs on comes
                  first when it is listed (Open MPI's rule): rank 0, which reads CONFIG
                  and writes the profiler report, is on this node if HOSTFILE names it,
                  else on the first host
  CONFIG          moed's YAML config; only rank 0 reads it (made absolute if it exists here)
  MOED_ARGS       passed to moed after --config CONFIG, e.g. --steps 50 --bench
  -- MPIRUN_ARGS  everything after '--' goes to mpirun (before moed), e.g.
                  -- --oversubscribe --mca pml ob1

options:
  -n N, -np N     number of ranks (default: the sum of slots= in HOSTFILE; required if a
                  host has no slots=)
  --moed PATH     the moed binary; must exist at this same absolute path on every node
                  (default: \$MOED, else $repo/build/moed if built, else moed on PATH)
  --iface LIST    keep MPI traffic and Open MPI's own wire-up on these interfaces or
                  subnets (e.g. eth1 or 10.1.0.0/16): sets btl_tcp_if_include and
                  oob_tcp_if_include. Default: Open MPI picks (may choose docker0/virbr0
                  and hang on multi-homed nodes: then set this)
  --map-by POLICY mpirun --map-by (default: slot, i.e. consecutive ranks share a node)
  --bind-to WHAT  mpirun --bind-to (default: none, so runtime.threads BLAS threads of a
                  rank are not pinned to one core; use core with threads: 1 and a core per
                  slot). With none, moed's runtime.bind (default auto) pins the ranks of a
                  node that has fewer cores than they need (docs/cores.md, "Binding")
  --dry-run       print the mpirun line and exit
  -h, --help      this text

Always added: --mca odls_base_sigkill_timeout 10 (on SIGINT/SIGTERM or a dead rank, Open
MPI sends SIGTERM, then SIGKILL after this many seconds; moed needs the time to write its
report; Open MPI's default is 1 s), and unless MPIRUN_ARGS set plm_rsh_*: --mca plm_rsh_args
"-o BatchMode=yes -o ConnectTimeout=10" (a host that does not answer, or asks for a
password, fails in 10 s instead of hanging). Every MOED_* variable set here
(MOED_CONTROL_TOKEN, MOED_LOG_LEVEL, ...), UCX_NET_DEVICES, OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS are forwarded to every rank (-x).

As root (containers), export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
first. To check that every node has the same moed (one line per node, equal sums):
  mpirun --hostfile HOSTFILE --map-by ppr:1:node sh -c 'echo "\$(hostname) \$(sha256sum < MOED)"'

examples:
  deploy/$prog deploy/hostfile.example configs/experts.yaml -n 3
  deploy/$prog --iface eth1 hosts /shared/moed/mixtral.yaml --steps 100
  echo 'localhost slots=3' > /tmp/hosts
  deploy/$prog /tmp/hosts configs/experts.yaml --steps 5
exit status: mpirun's: 0 ok; the first failing rank's moed code (3 bad config, 4 bad
weights, ...: moed --help); 1 when a signal (Ctrl-C, SIGTERM) ended the job or a rank could
not start (too few slots); 255 when a node's daemon could not start (ssh failed). This
script's own argument errors exit 2 before anything runs, with a line starting '$prog:'.
EOF
}

die() {
  echo "$prog: error: $*" >&2
  exit 2
}

np=""
moed="${MOED:-}"
iface=""
map_by="slot"
bind_to="none"
dry_run=0
positional=()
mpirun_extra=()
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    -n | -np | --np)
      (($# >= 2)) || die "$1 needs a number"
      np=$2; shift 2 ;;
    --moed)
      (($# >= 2)) || die "--moed needs a path"
      moed=$2; shift 2 ;;
    --iface)
      (($# >= 2)) || die "--iface needs an interface or subnet list"
      iface=$2; shift 2 ;;
    --map-by)
      (($# >= 2)) || die "--map-by needs a policy"
      map_by=$2; shift 2 ;;
    --bind-to)
      (($# >= 2)) || die "--bind-to needs a value"
      bind_to=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --)
      shift
      mpirun_extra=("$@")
      break ;;
    *)
      # The first two positionals are HOSTFILE and CONFIG; after them, everything that is
      # not one of the options above (or --) is moed's.
      positional+=("$1"); shift ;;
  esac
done

((${#positional[@]} >= 2)) || { usage >&2; die "need HOSTFILE and CONFIG"; }
hostfile=${positional[0]}
config=${positional[1]}
moed_args=("${positional[@]:2}")

[[ -f "$hostfile" && -r "$hostfile" ]] || die "hostfile '$hostfile' is not a readable file"

# Ranks: the sum of slots=N over the hostfile's host lines.
if [[ -z "$np" ]]; then
  total=0
  lineno=0
  hosts_listed=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    read -r -a words <<<"$line"
    ((${#words[@]})) || continue
    slots=""
    # as Open MPI reads them: slots=N, count=N or cpu=N, spaces allowed around '='
    rest=" ${words[*]:1}"
    if [[ "$rest" =~ [[:space:]](slots|count|cpu)[[:space:]]*=[[:space:]]*([0-9]+) ]]; then
      slots=${BASH_REMATCH[2]}
    fi
    [[ -n "$slots" ]] || die "$hostfile:$lineno: host '${words[0]}' has no slots=N; add it or give -n N"
    total=$((total + 10#$slots))
    hosts_listed=$((hosts_listed + 1))
  done <"$hostfile"
  ((hosts_listed > 0)) || die "$hostfile has no host lines"
  ((total > 0)) || die "$hostfile: the sum of its slots is 0; give some, or -n N"
  np=$total
fi
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "-n needs a positive integer, got '$np'"

# moed: an absolute path, since every node starts it by the same path.
if [[ -z "$moed" ]]; then
  if [[ -x "$repo/build/moed" ]]; then
    moed="$repo/build/moed"
  else
    moed=$(command -v moed || true)
    [[ -n "$moed" ]] || die "moed not found: build it (cmake --build build) or give --moed PATH"
  fi
fi
[[ -f "$moed" && -x "$moed" ]] || die "moed '$moed' does not exist or is not executable"
moed=$(cd "$(dirname "$moed")" && pwd)/$(basename "$moed")

command -v mpirun >/dev/null || die "mpirun not found: run deploy/install-deps.sh"

# Only rank 0 reads CONFIG: on this node if the hostfile lists it, else on its first host.
if [[ -r "$config" ]]; then
  config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
else
  echo "$prog: warning: '$config' is not readable here; rank 0 (on this node if" \
       "$hostfile lists it, else on its first host) must be able to read it" >&2
fi

if [[ "$(id -u)" == 0 && ( -z "${OMPI_ALLOW_RUN_AS_ROOT:-}" ||
                           -z "${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-}" ) ]]; then
  echo "$prog: warning: running as root: mpirun will refuse unless" \
       "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are exported" >&2
fi

cmd=(mpirun --hostfile "$hostfile" -np "$np" --map-by "$map_by" --bind-to "$bind_to"
     --mca odls_base_sigkill_timeout 10)
if [[ -n "$iface" ]]; then
  cmd+=(--mca btl_tcp_if_include "$iface" --mca oob_tcp_if_include "$iface")
fi
# Alternatively pin interfaces by hand (after --), e.g.:
#   -- --mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1
if [[ " ${mpirun_extra[*]} " != *" plm_rsh_"* ]]; then
  cmd+=(--mca plm_rsh_args "-o BatchMode=yes -o ConnectTimeout=10")
fi
for v in $(compgen -e | grep '^MOED_' || true) UCX_NET_DEVICES OMP_NUM_THREADS \
         OPENBLAS_NUM_THREADS; do
  if [[ -n "${!v:-}" ]]; then
    cmd+=(-x "$v")
  fi
done
cmd+=("${mpirun_extra[@]}" "$moed" --config "$config" "${moed_args[@]}")

printf '%s:' "$prog" >&2
printf ' %q' "${cmd[@]}" >&2
printf '\n' >&2
if ((dry_run)); then
  exit 0
fi
exec "${cmd[@]}"
