#!/usr/bin/env bash
# vm.sh — persyst on a node as production runs it: a virtual machine that boots systemd as
# PID 1 on a pure cgroup v2 hierarchy, with Debian SUITE's Slurm (slurmctld and slurmd as
# systemd services, CgroupPlugin=cgroup/v2) and persyst's own .deb installed by dpkg -i.
# The node's tests (vmnode/, built with -tags vmnode) run inside it as root.
#
#   scripts/vm.sh                   (make test-vm; SUITE=trixie, Slurm 24.11, or forky, 26.05)
#   PERSYST_VM_SCOPE=release        TestNode's scenarios that Slurm's release decides only
#                                   (default all: those of the node's kernel as well)
#   PERSYST_VM_DEB=path.deb         the package to install (default: the one fresh-check.sh
#                                   built in a pristine SUITE root, build/package-SUITE/,
#                                   built there now when missing or older than the checkout)
#
# 1. The node's root: mmdebstrap (systemd, udev, dbus, Debian's kernel and initramfs,
#    munge, slurmctld, slurmd, slurm-client), cached as a tarball like fresh-check.sh's
#    (PERSYST_VM_CACHE, default /var/cache/persyst/vm, rebuilt after 7 days).
# 2. A copy of it with the node's configuration (below), the package, the tests and a
#    unit that runs them at boot and powers the machine off, made into a disk image
#    (mkfs.ext4 -d).
# 3. qemu boots Debian's kernel and initrd from it: software emulation (TCG, one thread:
#    the multi-threaded one crashed guests here), or KVM with PERSYST_VM_ACCEL=kvm where it
#    works. The tests' output comes on the second serial port and is shown as it comes;
#    the kernel's and systemd's on the first (build/_vm-SUITE/console.log). The whole boot
#    is bounded by PERSYST_VM_TIMEOUT seconds (default 1200); nothing is left running.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=${SUITE:-trixie}
case "$SUITE" in
trixie | forky) ;;
*) echo "vm: SUITE=$SUITE: want trixie (Slurm 24.11) or forky (Slurm 26.05)" >&2; exit 2 ;;
esac
# shellcheck source=need.sh
. "$ROOT/scripts/need.sh"
# shellcheck source=debroot.sh
. "$ROOT/scripts/debroot.sh"
log() { echo "vm: $*" >&2; }
die() { echo "vm: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it builds a Debian root owned by its users)"
need_cmd mmdebstrap mmdebstrap
need_cmd qemu-system-x86_64 qemu-system-x86
need_cmd mkfs.ext4 e2fsprogs
need_cmd go golang
need_report vm
CACHE=${PERSYST_VM_CACHE:-/var/cache/persyst/vm}
WORK=$ROOT/build/_vm-$SUITE
TIMEOUT=${PERSYST_VM_TIMEOUT:-1200}
t0=$SECONDS

# The package for SUITE's Slurm.
deb=${PERSYST_VM_DEB:-}
if [ -z "$deb" ]; then
	deb=$(ls -t "$ROOT/build/package-$SUITE"/persyst_*.deb 2>/dev/null | head -1 || true)
	stale=
	if [ -n "$deb" ]; then
		stale=$(cd "$ROOT" && git ls-files -co --exclude-standard | while read -r f; do
			[ "$f" -nt "$deb" ] && { echo "$f"; break; }
		done || true)
	fi
	if [ -z "$deb" ] || [ -n "$stale" ]; then
		log "building the package in a pristine $SUITE root (fresh-check.sh package)"
		mkdir -p "$ROOT/build"
		PERSYST_FRESH_SETUP_CACHE=1 SUITE=$SUITE "$ROOT/scripts/fresh-check.sh" package >"$ROOT/build/vm-package-$SUITE.log" 2>&1 ||
			{ tail -50 "$ROOT/build/vm-package-$SUITE.log"; die "the $SUITE package was not built"; }
		deb=$(ls -t "$ROOT/build/package-$SUITE"/persyst_*.deb | head -1)
	fi
fi
[ -f "$deb" ] || die "no package $deb"
log "package: $deb"

# 1. The node's root.
base=$CACHE/$SUITE-node.tar
debroot_tarball "$SUITE" "$base" 7 --variant=minbase \
	--include=systemd,systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,iproute2,procps,kmod,munge,slurmd,slurmctld,slurm-client ||
	die "mmdebstrap failed"

# 2. The disk image.
rm -rf "$WORK"
mkdir -p "$WORK/root"
tar -xf "$base" -C "$WORK/root"
r=$WORK/root
cp "$r"/boot/vmlinuz-* "$WORK/vmlinuz"
cp "$r"/boot/initrd.img-* "$WORK/initrd.img"

# The tests and the workloads they run, static.
(
	cd "$ROOT"
	CGO_ENABLED=0 go test -c -tags vmnode -trimpath -o "$r/root/vmnode.test" ./vmnode
	CGO_ENABLED=0 go test -c -trimpath -o "$r/root/syscount.test" ./daemon/measure/syscount
	CGO_ENABLED=0 go build -trimpath -o "$r/usr/local/bin/persyst-workload" ./cmd/persyst-workload
)
cp "$deb" "$r/root/persyst.deb"
# The node's tests (TestNode; the package's other tests read the checkout and run on the
# host), or PERSYST_VM_RUN's (go test -run) while iterating, PERSYST_VM_COUNT times
# (go test -count: a rare failure run again and again).
echo "${PERSYST_VM_RUN:-^TestNode\$}" >"$r/root/vmnode.run"
echo "${PERSYST_VM_COUNT:-1}" >"$r/root/vmnode.count"
# PERSYST_VM_SCOPE=release: only TestNode's scenarios that Slurm's release decides, not
# those that judge what the kernel measures (scripts/test.sh: every node after the first).
echo "${PERSYST_VM_SCOPE:-all}" >"$r/root/vmnode.scope"
# The system call counter's tests that take each way of counting the kernel allows: the
# host refuses fentry programs, the node's kernel takes them (PERSYST_VM_SYSCOUNT_RUN,
# empty: none).
# The tests of what the programs do, not those that compare rates over time
# (TestSampledEstimate, TestCPUSplit): under qemu's single-threaded emulation the
# attach and detach between the windows take the storm's CPU (their estimates came out
# +24 to +100 %, the CPU split 0.32 in windows of 0.50 of the time, on trixie's node).
# They run on the host; here TestNode's storm checks the daemon's estimate (CPU time).
printf %s "${PERSYST_VM_SYSCOUNT_RUN-^(TestFilesApart|TestLinger|TestBetweenWindows)\$}" >"$r/root/syscount.run"

# The node's name resolves to an address of its own (it has no network device: a dummy one).
echo vmnode >"$r/etc/hostname"
printf '127.0.0.1 localhost\n10.213.99.1 vmnode\n' >"$r/etc/hosts"
cat >"$r/etc/systemd/system/vmnode-net.service" <<'EOF'
[Unit]
Description=the test node's address (a dummy interface)
DefaultDependencies=no
Before=network-online.target munge.service slurmctld.service slurmd.service
After=systemd-udevd.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link add vm0 type dummy
ExecStart=/sbin/ip addr add 10.213.99.1/24 dev vm0
ExecStart=/sbin/ip link set vm0 up
ExecStart=/sbin/ip link set lo up
[Install]
WantedBy=multi-user.target
EOF

# Slurm: one node, cgroup/v2, memory a consumable resource jobs are held to.
cat >"$r/etc/slurm/slurm.conf" <<'EOF'
# The virtual test node (scripts/vm.sh), not a production template.
ClusterName=vmnode
SlurmctldHost=vmnode
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdDebug=debug
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
PrologFlags=Contain
JobAcctGatherType=jobacct_gather/cgroup
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=400
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
NodeName=vmnode CPUs=2 RealMemory=1200 State=UNKNOWN
PartitionName=debug Nodes=vmnode Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$r/etc/slurm/cgroup.conf" <<'EOF'
CgroupPlugin=cgroup/v2
ConstrainCores=yes
ConstrainRAMSpace=yes
EOF
# Under software emulation the node's boot is CPU time: the kernel modules no test needs
# are not loaded (a display's, EFI's pstore, configfs: 38 s of units on trixie's node,
# 2026-12-05, by systemd-analyze blame, which itself took 15 s there).
for u in modprobe@drm modprobe@efi_pstore modprobe@configfs; do
	ln -sf /dev/null "$r/etc/systemd/system/$u.service"
done
# A user to run the jobs.
chroot "$r" useradd --create-home --uid 1500 --shell /bin/bash vmuser
# munge's key, when its package made none (it does not in a root without a running system).
if [ ! -s "$r/etc/munge/munge.key" ]; then
	head -c 1024 /dev/urandom >"$r/etc/munge/munge.key"
	chroot "$r" chown munge:munge /etc/munge/munge.key
	chmod 0400 "$r/etc/munge/munge.key"
fi

# The unit that runs the tests once the node is up, then powers it off.
cat >"$r/root/vmnode-run.sh" <<'EOF'
#!/bin/sh
# Run by vmnode-test.service: the node's facts, the package, the tests; then power off.
exec >/dev/ttyS1 2>&1
mu=$(systemctl show -P ActiveEnterTimestampMonotonic multi-user.target)
echo "vmnode: multi-user.target reached $((mu / 1000000)) s after boot; the tests start at $(cut -d' ' -f1 /proc/uptime) s"
echo "vmnode: PID 1 is $(cat /proc/1/comm): $(systemctl --version | head -1)"
echo "vmnode: facts read at $(cut -d' ' -f1 /proc/uptime) s"
echo "vmnode: /sys/fs/cgroup is $(stat -f -c %T /sys/fs/cgroup); controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "vmnode: $(sinfo --version); $(scontrol show config | grep -E '^CgroupPlugin ' | tr -s ' ')"
if dpkg -i /root/persyst.deb >/root/dpkg.log 2>&1; then
	echo "vmnode: installed $(dpkg-query -W -f '${Package} ${Version}' persyst) with dpkg -i (at $(cut -d' ' -f1 /proc/uptime) s)"
	cd /root
	rc=0
	if [ -s syscount.run ]; then
		CI=1 ./syscount.test -test.v -test.timeout 5m -test.run "$(cat syscount.run)" || rc=$?
	fi
	PERSYST_VM_SCOPE=$(cat /root/vmnode.scope) ./vmnode.test -test.v -test.timeout 20m -test.run "$(cat /root/vmnode.run)" -test.count "$(cat /root/vmnode.count)" || rc=$?
else
	cat /root/dpkg.log
	rc=1
fi
echo "vmnode: tests exited $rc (at $(cut -d' ' -f1 /proc/uptime) s)"
# At once: the disk is thrown away, and stopping the node's services took 50-65 s of
# emulated CPU (2026-12-05).
sync
systemctl poweroff --force --force
EOF
chmod 0755 "$r/root/vmnode-run.sh"
cat >"$r/etc/systemd/system/vmnode-test.service" <<'EOF'
[Unit]
Description=persyst's tests on the virtual node
After=multi-user.target slurmd.service slurmctld.service munge.service vmnode-net.service
Wants=slurmd.service slurmctld.service munge.service
[Service]
Type=oneshot
ExecStart=/root/vmnode-run.sh
[Install]
WantedBy=multi-user.target
EOF
for u in vmnode-net vmnode-test; do
	ln -sf "/etc/systemd/system/$u.service" "$r/etc/systemd/system/multi-user.target.wants/$u.service"
done

truncate -s 3G "$WORK/disk.img"
mkfs.ext4 -q -F -L vmnode -d "$r" "$WORK/disk.img"
rm -rf "$r"
log "disk image ready after $((SECONDS - t0)) s"

# 3. Boot it. A boot that never reaches the tests within PERSYST_VM_BOOT_TIMEOUT seconds
# (default 300; software emulation has crashed a guest's kernel as it booted) is tried
# once more on a fresh copy of the disk; the tests themselves run once.
accel=(-accel tcg,thread=single -cpu max)
[ "${PERSYST_VM_ACCEL:-tcg}" = kvm ] && accel=(-accel kvm -cpu host)
cp --sparse=always "$WORK/disk.img" "$WORK/disk0.img"
tailpid=
qpid=
trap 'kill $tailpid $qpid 2>/dev/null || true' EXIT
# boot: run the machine until it powers off; 0 when the tests ran (whatever their verdict),
# 3 when it never reached them.
boot() {
	local rc=0 started= why=
	cp --sparse=always "$WORK/disk0.img" "$WORK/disk.img"
	: >"$WORK/tests.log"
	tail -n +1 -F "$WORK/tests.log" 2>/dev/null &
	tailpid=$!
	timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 -machine q35 "${accel[@]}" -smp 2 -m 2048 \
		-nic none -no-reboot -display none -monitor none \
		-kernel "$WORK/vmlinuz" -initrd "$WORK/initrd.img" \
		-append "root=/dev/vda rw console=ttyS0 panic=-1 systemd.unified_cgroup_hierarchy=1 quiet" \
		-drive "file=$WORK/disk.img,format=raw,if=virtio" \
		-serial "file:$WORK/console.log" -serial "file:$WORK/tests.log" &
	qpid=$!
	local tq=$SECONDS
	while kill -0 "$qpid" 2>/dev/null; do
		if [ -z "$started" ] && grep -aq '^vmnode: ' "$WORK/tests.log"; then
			started=1
			log "the node reached its tests $((SECONDS - tq)) s after qemu started"
		fi
		if [ -z "$started" ] && [ $((SECONDS - tq)) -gt "${PERSYST_VM_BOOT_TIMEOUT:-300}" ]; then
			why="stopped: no test began within ${PERSYST_VM_BOOT_TIMEOUT:-300} s"
			kill "$qpid" 2>/dev/null || true
		fi
		sleep 1
	done
	wait "$qpid" || rc=$?
	qpid=
	sleep 1
	kill "$tailpid" 2>/dev/null || true
	if [ -z "$started" ] && ! grep -aq '^vmnode: ' "$WORK/tests.log"; then
		tail -30 "$WORK/console.log"
		log "$SUITE: the node did not reach its tests (${why:-qemu exited $rc}; console above)"
		return 3
	fi
	[ "$rc" = 124 ] && { tail -30 "$WORK/console.log"; die "$SUITE: the node did not power off within $TIMEOUT s (console above)"; }
	[ "$rc" = 0 ] || { tail -30 "$WORK/console.log"; die "$SUITE: qemu exited $rc (console above)"; }
	return 0
}
tb=$SECONDS
if ! boot; then
	log "$SUITE: booting the node once more"
	tb=$SECONDS
	boot || die "$SUITE: the node did not reach its tests twice"
fi
verdict=$(tr -d '\r' <"$WORK/tests.log" | grep -a '^vmnode: tests exited' | tail -1 | sed 's/ (at .*//' || true)
[ -n "$verdict" ] || { tail -30 "$WORK/console.log"; die "$SUITE: the tests did not finish (console above)"; }
if [ "$verdict" != "vmnode: tests exited 0" ]; then
	# The last lines of each failed test's output once more, next to the verdict: a CI
	# log that keeps only its tail keeps why, not only which.
	tr -d '\r' <"$WORK/tests.log" | awk '
		/^=== RUN / { cur = $3; n[cur] = 0; next }
		/^ *--- FAIL: / {
			# Taken now: with PERSYST_VM_COUNT a later run of the test starts anew.
			f = $3
			if (n[f] > 0) {
				out = out "vm: the last lines of " f ":\n"
				for (k = (n[f] > 40 ? n[f] - 40 : 0); k < n[f]; k++) out = out line[f, k % 40] "\n"
			}
			next
		}
		cur != "" { line[cur, n[cur]++ % 40] = $0 }
		END { printf "%s", out }'
	die "$SUITE: the node's tests failed ($verdict; output above)"
fi
rm -f "$WORK/disk0.img"
log "$SUITE: every test on the node passed; boot to power-off $((SECONDS - tb)) s, all $((SECONDS - t0)) s"
