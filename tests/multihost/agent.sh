#!/bin/sh
# agent.sh HOST CMD...: Open MPI's remote launcher (--mca plm_rsh_agent) for
# tests/multihost/run.sh, standing in for ssh. HOST is an address from the test's hostfile;
# $MOED_MH_MAP names a file of "ADDRESS NAMESPACE HOSTNAME" lines written by run.sh. Like
# ssh, the words of CMD are joined with spaces and run by a shell (Open MPI quotes the orted
# command line for a remote shell), here inside HOST's network namespace and a fresh UTS
# namespace carrying HOST's own host name. It never reaches anything outside that map.
set -eu
map=${MOED_MH_MAP:?agent.sh: MOED_MH_MAP is not set}
[ $# -ge 2 ] || { echo "agent.sh: usage: agent.sh HOST CMD..." >&2; exit 255; }
host=$1
shift
ns='' name=''
while read -r addr n h; do
  if [ "$addr" = "$host" ]; then ns=$n name=$h; break; fi
done < "$map"
[ -n "$ns" ] || { echo "agent.sh: host '$host' is not in $map" >&2; exit 255; }
# A record of each launch, for run.sh to check that the daemons really went through here.
if [ -n "${MOED_MH_LOG:-}" ]; then echo "$host $ns $name: $*" >> "$MOED_MH_LOG"; fi
# shellcheck disable=SC2016  # $1 and $2 belong to the inner shell
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1" && eval "$2"' agent "$name" "$*"
