#!/usr/bin/env bash
# scripts/mpi-two-hosts.sh — rehearse a two-host MPI run on one machine: two network namespaces
# ("hosts" 10.77.0.1 and 10.77.0.2) joined by a veth pair, mpirun started in the first reaching
# the second through an rsh agent that runs `ip netns exec`, MPI restricted to TCP over the veth
# link (no shared memory between the ranks), and the two-rank test program
# (tests/distributed_mpi) run across them. Root and iproute2 needed; ctest runs it as
# distributed_two_hosts (about 5 s), skipped where namespaces cannot be made.
#
#   scripts/mpi-two-hosts.sh [BUILD_DIR] [-- extra arguments for the program]
#   (default BUILD_DIR: build; it must hold tests/test_distributed_mpi)
#
# Prints the ranks' hosts, the program's report, and "TWO HOSTS: PASS" or "TWO HOSTS: FAIL"
# ("SKIPPED: <why>" where namespaces cannot be made).
# The namespaces and the agent are removed on exit, whatever happens.
set -euo pipefail
build=build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then build=$1; shift; fi
[ "${1:-}" = "--" ] && shift
[ -x "$build/tests/test_distributed_mpi" ] ||
  { echo "mpi-two-hosts.sh: $build/tests/test_distributed_mpi not built (cmake --build $build --target test_distributed_mpi)" >&2; exit 1; }
prog=$(cd "$build" && pwd)/tests/test_distributed_mpi
# Where namespaces cannot be made (not root, a container without the capability) the rehearsal
# cannot run: it says so on a line ctest recognises as a skip, and exits 0.
[ "$(id -u)" = 0 ] || { echo "SKIPPED: mpi-two-hosts.sh needs root (network namespaces)"; exit 0; }
command -v ip > /dev/null || { echo "SKIPPED: mpi-two-hosts.sh needs iproute2 (ip)"; exit 0; }
command -v mpirun > /dev/null || { echo "mpi-two-hosts.sh: needs mpirun (openmpi-bin)" >&2; exit 1; }
# The rsh agent and TCP options below are Open MPI's.
mpirun --version 2>&1 | grep -q "Open MPI" || { echo "SKIPPED: mpi-two-hosts.sh drives Open MPI's mpirun, not $(mpirun --version 2>&1 | head -1)"; exit 0; }

tag=mt$$
ns_a=$tag-a ns_b=$tag-b
ip_a=10.77.0.1 ip_b=10.77.0.2
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2> /dev/null || true
  ip netns del "$ns_b" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if ! ip netns add "$ns_a" 2> "$work/netns.err"; then
  echo "SKIPPED: network namespaces are not permitted here: $(cat "$work/netns.err")"
  exit 0
fi
ip netns add "$ns_b"
ip link add "$tag-va" type veth peer name "$tag-vb"
ip link set "$tag-va" netns "$ns_a"
ip link set "$tag-vb" netns "$ns_b"
ip -n "$ns_a" addr add "$ip_a/24" dev "$tag-va"
ip -n "$ns_b" addr add "$ip_b/24" dev "$tag-vb"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "$tag-va" up
ip -n "$ns_b" link set "$tag-vb" up

# The rsh agent: Open MPI runs `<agent> <host> <command...>` to start its daemon on a remote
# host; here "remote" means the other namespace.
cat > "$work/netns-rsh" << EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $ip_a) ns=$ns_a ;;
  $ip_b) ns=$ns_b ;;
  *) echo "netns-rsh: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$work/netns-rsh"

# A rank reports where it runs: the network namespace's veth address proves which "host" it is on.
cat > "$work/where" << 'EOF'
#!/bin/sh
echo "rank ${OMPI_COMM_WORLD_RANK:-?} on $(ip -o -4 addr show | awk '$2 != "lo" {print $4}')"
EOF
chmod +x "$work/where"

mpirun_args=(--allow-run-as-root -np 2 --host "$ip_a,$ip_b"
  --mca plm_rsh_agent "$work/netns-rsh" --mca plm_rsh_no_tree_spawn 1
  --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24
  -x OMP_NUM_THREADS=1 -x MIXTAPE_DIST_TIMEOUT=120)

echo "== where the ranks run"
ip netns exec "$ns_a" mpirun "${mpirun_args[@]}" "$work/where" | sort
echo "== tests/distributed_mpi across the two namespaces (TCP only)"
if ip netns exec "$ns_a" mpirun "${mpirun_args[@]}" "$prog" "$@"; then
  echo "TWO HOSTS: PASS"
else
  echo "TWO HOSTS: FAIL"
  exit 1
fi
