#!/usr/bin/env bash
# test/hosts.sh: two "hosts" on one machine for test_hosts.c. Each host is a network
# namespace with one end of a veth pair and its own address (198.18.0.1, .2: the
# range RFC 2544 sets aside for benchmarking interconnects, here only on the veths),
# its own host name (a UTS namespace) and its own local disk (a mount namespace in
# which ROOT/local is ROOT/host1 or ROOT/host2). Everything else (the binaries, the
# repository) is one file system, as on a cluster with a shared home directory.
#
#   hosts.sh up ROOT              create both hosts (ROOT = /tmp/mlstm_hosts_<owner pid>);
#                                 exit 3 when this machine cannot create namespaces or veths
#   hosts.sh down ROOT            stop every process left on them, delete them, remove ROOT
#   hosts.sh run ROOT N CMD...    run CMD on host N (1 or 2), as a login there would
#   hosts.sh agent ROOT ADDR CMD  Open MPI's launch agent (--mca plm_rsh_agent "hosts.sh agent ROOT"):
#                                 what ssh does, run the command line CMD on the host at ADDR
#   hosts.sh pid ROOT N PROGRAM   the processes on host N whose argv[0] is PROGRAM
#   hosts.sh bytes ROOT N         bytes received and sent by host N's veth: "RX TX"
#   hosts.sh cut ROOT N           take host N's veth down: the host is gone, its connections left open
set -u
cmd=${1:-}
root=${2:-}
[ -n "$cmd" ] && [ -n "$root" ] || { echo "usage: $0 up|down|run|agent|pid|bytes|cut ROOT ..." >&2; exit 2; }
id=$(basename "$root")               # mlstm_hosts_<pid>
netns() { echo "$id-$1"; }           # host N's network namespace
veth() { echo "mlh${id##*_}-$1"; }   # host N's end of the pair (at most 15 characters)
addr() { echo "198.18.0.$1"; }

# Runs "$@" on host N: in its network namespace, under its host name, with its disk at ROOT/local.
on_host() {
    local n=$1
    shift
    exec ip netns exec "$(netns "$n")" unshare --uts --mount --propagation private \
        sh -c 'hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"' \
        sh "mlstm-host$n" "$root/host$n" "$root/local" "$@"
}

down() {
    local r=$1 i=$(basename "$1") n p
    for n in 1 2; do
        ip netns list 2> /dev/null | grep -q "^$i-$n\b" || continue
        # only this test's processes are in its namespaces: mpirun, orted, the trainers
        for p in $(ip netns pids "$i-$n" 2> /dev/null); do kill -9 "$p" 2> /dev/null; done
        ip netns delete "$i-$n"       # the veth pair goes with it
    done
    case $r in /tmp/mlstm_hosts_[0-9]*) rm -rf "$r" ;; esac
}

case $cmd in
up)
    # first the hosts of earlier runs that were killed before they could remove them
    for ns in $(ip netns list 2> /dev/null | grep -o '^mlstm_hosts_[0-9]*-[12]\b'); do
        owner=${ns#mlstm_hosts_}
        owner=${owner%-*}
        kill -0 "$owner" 2> /dev/null || down "/tmp/mlstm_hosts_$owner"
    done
    mkdir -p "$root/host1" "$root/host2" "$root/local" || exit 1
    if ! err=$(ip netns add "$(netns 1)" 2>&1); then
        echo "cannot create a network namespace (ip netns add: $err)"
        exit 3
    fi
    ip netns add "$(netns 2)" || exit 1
    if ! err=$(ip link add "$(veth 1)" type veth peer name "$(veth 2)" 2>&1); then
        echo "cannot create a veth pair (ip link add: $err)"
        down "$root"
        exit 3
    fi
    for n in 1 2; do
        ip link set "$(veth "$n")" netns "$(netns "$n")" &&
            ip -n "$(netns "$n")" addr add "$(addr "$n")/30" dev "$(veth "$n")" &&
            ip -n "$(netns "$n")" link set "$(veth "$n")" up &&
            ip -n "$(netns "$n")" link set lo up || { down "$root"; exit 1; }
    done
    printf '%s slots=1\n%s slots=1\n' "$(addr 1)" "$(addr 2)" > "$root/hostfile"
    ;;
down) down "$root" ;;
run)
    n=$3
    shift 3
    on_host "$n" "$@"
    ;;
agent)
    # Open MPI calls its agent as ssh: HOST, then a command line for the remote shell
    case $3 in
    "$(addr 1)") n=1 ;;
    "$(addr 2)") n=2 ;;
    *) echo "hosts.sh agent: no host $3 here" >&2; exit 1 ;;
    esac
    shift 3
    # with the environment a login by ssh gets, not mpirun's: what the ranks there need
    # must come by mpirun -x or --mca, as on a cluster
    on_host "$n" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="${HOME:-/}" USER="${USER:-root}" SHELL=/bin/sh \
        sh -c "$*"
    ;;
pid)
    for p in $(ip netns pids "$(netns "$3")" 2> /dev/null); do
        [ "$(tr '\0' '\n' < "/proc/$p/cmdline" 2> /dev/null | head -n 1)" = "$4" ] && echo "$p"
    done
    ;;
cut) ip -n "$(netns "$3")" link set "$(veth "$3")" down ;;
bytes)
    d=/sys/class/net/$(veth "$3")/statistics
    ip netns exec "$(netns "$3")" sh -c "echo \$(cat $d/rx_bytes) \$(cat $d/tx_bytes)"
    ;;
*) echo "hosts.sh: unknown command $cmd" >&2; exit 2 ;;
esac
