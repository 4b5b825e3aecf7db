#!/usr/bin/env bash
# testhosts.sh - throwaway Debian hosts (bookworm, or trixie: TESTHOSTS_SUITE) reachable over real
# SSH, for Ansible/paramiko tests.
# (provision's own copy of the recipe in the project's shared tools; the tests need nothing outside
# the repository. Changes here: a host-name prefix and a separate base path so that two sets of
# hosts can run side by side over one cached root filesystem, an ssh_config output, and `down`
# that also removes what an interrupted `up` left half made.)
#
# Each host = overlayfs clone of ONE debootstrap rootfs + its own network namespace (veth on a
# private bridge, 10.200.0.0/24 by default) + either
#   MODE=nspawn (default): systemd-nspawn --boot, real systemd as PID 1 (systemctl, ansible
#                          'systemd'/'service' modules work; ~1-2 s boot), or
#   MODE=chroot:           unshare(mount,pid,uts,ipc) + chroot, sshd as the only process under
#                          dumb-init (no systemd; starts in ~0.1 s).
# No route leaves the bridge (the host keeps net.ipv4.ip_forward=0).  apt and pip inside the hosts
# go through a tinyproxy on the bridge address that only lets the Debian mirror and PyPI through.
# DNS inside hosts points to 127.0.0.1 (fails fast; hosts need none because apt/pip use the proxy).
#
# Usage (root):  testhosts.sh up [N]   # build base once (~1 min), start N hosts (default 4)
#                testhosts.sh down      # stop all hosts, remove clones, bridge, proxy
#                testhosts.sh status
#                testhosts.sh base      # only build the base rootfs
#                testhosts.sh clean     # down + remove the base rootfs and keys
# Env: TESTHOSTS_DIR (default /var/tmp/provision-testhosts), TESTHOSTS_MODE (nspawn|chroot),
#      TESTHOSTS_BASE (the debootstrap rootfs, default /var/tmp/provision-testhosts-base; reused
#      between runs), TESTHOSTS_PREFIX (host, netns and veth name prefix, default th),
#      TESTHOSTS_BRIDGE (default thbr0), TESTHOSTS_SUITE (the Debian release of the base, default
#      bookworm; each suite needs its own TESTHOSTS_BASE, e.g. /var/tmp/provision-testhosts-base-trixie),
#      TESTHOSTS_NET (default 10.200.0), TESTHOSTS_RO_BINDS (colon-separated host dirs bind-mounted
#      read-only at the same path in every host, e.g. a local wheel directory so a playbook can pip-install
#      a CPU torch wheel with --find-links DIR).
# Outputs in $TESTHOSTS_DIR: id_ed25519 (client key), known_hosts (real host keys),
#   inventory.ini (Ansible; group 'testhosts'), hosts.json (for paramiko/pytest), ssh_config.
# Hosts ${PFX}1..${PFX}N at $NET.11.. ; users: root (key) and 'deploy' (key, passwordless sudo).
set -euo pipefail
D=${TESTHOSTS_DIR:-/var/tmp/provision-testhosts}
BASE=${TESTHOSTS_BASE:-/var/tmp/provision-testhosts-base}
PFX=${TESTHOSTS_PREFIX:-th}
MODE=${TESTHOSTS_MODE:-nspawn}
NET=${TESTHOSTS_NET:-10.200.0}
BR=${TESTHOSTS_BRIDGE:-thbr0}
SUITE=${TESTHOSTS_SUITE:-bookworm}
RO_BINDS=${TESTHOSTS_RO_BINDS:-}
MIRROR=${TESTHOSTS_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
PKGS=openssh-server,python3,python3-apt,sudo,iproute2,procps,dumb-init,ca-certificates,systemd,systemd-sysv,dbus
GW=$NET.1; PORT=3128

log(){ echo "[testhosts] $*" >&2; }

deps() {
  local need=()
  command -v debootstrap    >/dev/null || need+=(debootstrap)
  command -v tinyproxy      >/dev/null || need+=(tinyproxy)
  command -v ip             >/dev/null || need+=(iproute2)
  command -v ssh-keygen     >/dev/null || need+=(openssh-client)
  [[ $MODE != nspawn ]] || command -v systemd-nspawn >/dev/null || need+=(systemd-container)
  if ((${#need[@]})); then
    log "apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${need[@]}" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null; apt-get install -y -q "${need[@]}" >/dev/null; }
  fi
}

base() {
  # one build at a time per base (two sessions may start on a fresh machine together)
  mkdir -p "$(dirname "$BASE")"; exec 9>"$BASE.lock"; flock 9
  if [[ -f $BASE/.ready ]]; then
    local built; built=$(cat "$BASE/.ready")
    # a base of another release under this path would give hosts of the wrong release, silently
    [[ -z $built || $built == "$SUITE" ]] || { log "$BASE holds $built, not $SUITE: set TESTHOSTS_BASE"; exit 1; }
    exec 9>&-; return
  fi
  rm -rf "$BASE"; mkdir -p "$D" "$(dirname "$BASE")"
  log "debootstrap $SUITE minbase -> $BASE (about 1 min)"
  rm -rf "$BASE.tmp"
  debootstrap --variant=minbase --include=$PKGS "$SUITE" "$BASE.tmp" "$MIRROR" > "$D/debootstrap.log" 2>&1 ||
    { tail -20 "$D/debootstrap.log" >&2; exit 1; }
  local B=$BASE.tmp
  rm -f "$B"/etc/ssh/ssh_host_*
  cat > "$B/etc/ssh/sshd_config.d/10-testhost.conf" <<CONF
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF
  printf 'Acquire::http::Proxy "http://%s:%s";\nAcquire::https::Proxy "http://%s:%s";\n' $GW $PORT $GW $PORT \
    > "$B/etc/apt/apt.conf.d/01testhost-proxy"
  printf 'http_proxy=http://%s:%s\nhttps_proxy=http://%s:%s\nno_proxy=localhost,127.0.0.1\n' $GW $PORT $GW $PORT \
    >> "$B/etc/environment"
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' > "$B/etc/resolv.conf"
  trust_host_cas "$B"
  chroot "$B" useradd -m -s /bin/bash -G sudo deploy
  echo 'deploy ALL=(ALL) NOPASSWD:ALL' > "$B/etc/sudoers.d/deploy"; chmod 440 "$B/etc/sudoers.d/deploy"
  # nspawn boot: no getty on the console, no udev-less waits
  chroot "$B" systemctl mask console-getty.service getty@tty1.service systemd-udevd.service >/dev/null 2>&1 || true
  chroot "$B" apt-get clean
  echo "$SUITE" > "$B/.ready"; mv "$B" "$BASE"   # atomic: a half-built base is never used
  exec 9>&-
}

trust_host_cas() {  # the registries here are reached through a TLS proxy whose CA only the host trusts
  local B=$1 c
  for c in /usr/local/share/ca-certificates/*.crt; do [[ -f $c ]] && cp "$c" "$B/usr/local/share/ca-certificates/"; done
  chroot "$B" update-ca-certificates >/dev/null 2>&1 || true
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$B/etc/pip.conf"
  grep -q REQUESTS_CA_BUNDLE "$B/etc/environment" ||
    printf 'REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt\nSSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n' >> "$B/etc/environment"
}

keys() {
  mkdir -p "$D"
  [[ -f $D/id_ed25519 ]] || ssh-keygen -q -t ed25519 -N '' -C testhosts -f "$D/id_ed25519"
}

authorize() {  # $1 = a host's root: the client key of this set of hosts (the base stays keyless)
  local R=$1 h
  for h in "$R/root" "$R/home/deploy"; do
    mkdir -p "$h/.ssh"; cp "$D/id_ed25519.pub" "$h/.ssh/authorized_keys"
    chmod 700 "$h/.ssh"; chmod 600 "$h/.ssh/authorized_keys"
  done
  chroot "$R" chown -R deploy:deploy /home/deploy/.ssh
}

net_up() {
  if ! ip link show "$BR" >/dev/null 2>&1; then
    if ip route show | grep -q "^$NET\."; then log "a route for $NET.0/24 exists already; set TESTHOSTS_NET"; exit 1; fi
    ip link add "$BR" type bridge; ip addr add "$GW/24" dev "$BR"; ip link set "$BR" up
  fi
  if ! { [[ -f $D/proxy.pid ]] && kill -0 "$(cat "$D/proxy.pid")" 2>/dev/null; }; then
    printf '^deb\\.debian\\.org$\n^security\\.debian\\.org$\n^pypi\\.org$\n^files\\.pythonhosted\\.org$\n' > "$D/proxy.filter"
    cat > "$D/proxy.conf" <<CONF
Port $PORT
Listen $GW
Timeout 600
MaxClients 100
Allow $NET.0/24
Filter "$D/proxy.filter"
FilterDefaultDeny Yes
ConnectPort 443
LogLevel Connect
PidFile "$D/proxy.pid"
LogFile "$D/proxy.log"
CONF
    tinyproxy -c "$D/proxy.conf"
    local t; for t in $(seq 50); do [[ -s $D/proxy.pid ]] && break; sleep 0.1; done
  fi
}

start_host() {  # $1 = index, $2 = how many hosts share this machine's cores
  local n=$PFX$1 H=$D/hosts/$PFX$1 ip=$NET.$((10+$1))
  mkdir -p "$H/upper" "$H/work" "$H/root"
  mountpoint -q "$H/root" || mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$H/upper,workdir=$H/work" "$H/root"
  local R=$H/root
  echo "$n" > "$R/etc/hostname"; printf '127.0.0.1 localhost\n%s %s\n' "$ip" "$n" > "$R/etc/hosts"
  # The base was built for one set's bridge; point apt and pip at this set's proxy (TESTHOSTS_NET).
  printf 'Acquire::http::Proxy "http://%s:%s";\nAcquire::https::Proxy "http://%s:%s";\n' $GW $PORT $GW $PORT \
    > "$R/etc/apt/apt.conf.d/01testhost-proxy"
  sed -i "s#^\(https\?_proxy=http://\)[0-9.]*:#\1$GW:#" "$R/etc/environment"
  # The hosts share this machine's cores, but each sees all of them: torch (the smoke job) starts
  # one spinning OpenMP thread per core in every host, and four hosts' jobs at once on two cores
  # took 3.3x the wall time of the same jobs at one thread each (11.3 s vs 3.4 s, measured). Each
  # host gets its share of the cores, as its own machine would have its own; read through pam_env.
  local share=$(( $(nproc) / $2 )); (( share >= 1 )) || share=1
  sed -i '/^OMP_NUM_THREADS=/d' "$R/etc/environment"; echo "OMP_NUM_THREADS=$share" >> "$R/etc/environment"
  [[ -f $R/etc/ssh/ssh_host_ed25519_key ]] || ssh-keygen -q -t ed25519 -N '' -C "$n" -f "$R/etc/ssh/ssh_host_ed25519_key"
  authorize "$R"
  ip netns add "$n" 2>/dev/null || true
  if ! ip -n "$n" link show eth0 >/dev/null 2>&1; then
    ip link add "$n-h" type veth peer name eth0 netns "$n"
    ip link set "$n-h" master "$BR" up
    ip -n "$n" addr add "$ip/24" dev eth0; ip -n "$n" link set lo up; ip -n "$n" link set eth0 up
    ip -n "$n" route add default via "$GW"
  fi
  local b binds=() IFS=:
  for b in $RO_BINDS; do [[ -n $b ]] && binds+=("$b"); done
  unset IFS
  if [[ $MODE == nspawn ]]; then
    local args=()
    for b in "${binds[@]}"; do args+=("--bind-ro=$b"); done
    setsid systemd-nspawn -q -D "$R" --machine="$n" --network-namespace-path="/run/netns/$n" \
      --register=no --keep-unit --resolv-conf=off --timezone=off --link-journal=no \
      --console=read-only "${args[@]}" -b > "$H/console.log" 2>&1 < /dev/null &
    echo $! > "$H/pid"
  else
    printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"; chmod +x "$R/usr/sbin/policy-rc.d"
    for b in "${binds[@]}"; do mkdir -p "$R$b"; done
    # inner: private mounts, fresh /proc /sys /run /tmp, ro binds, then sshd as the only service.
    # unshare --fork ignores SIGTERM: 'down' SIGKILLs it and --kill-child takes the init with it.
    setsid ip netns exec "$n" unshare --mount --pid --uts --ipc --fork --kill-child sh -c '
      set -e; R=$1; hn=$2; shift 2; hostname "$hn"; mount --make-rprivate /
      mount -t proc proc "$R/proc"; mount -t sysfs sysfs "$R/sys"
      mount -t tmpfs -o mode=755 tmpfs "$R/run"; mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
      mount --rbind /dev "$R/dev"; mkdir -p "$R/run/sshd"
      for b in "$@"; do mount --bind "$b" "$R$b"; mount -o remount,bind,ro "$R$b"; done
      exec chroot "$R" /usr/bin/dumb-init /usr/sbin/sshd -D -e' sh "$R" "$n" "${binds[@]}" \
      > "$H/console.log" 2>&1 < /dev/null &
    echo $! > "$H/pid"
  fi
  echo "$MODE" > "$H/mode"
}

write_outputs() {
  local n=$1 i ip
  : > "$D/known_hosts"; : > "$D/ssh_config"; echo "[testhosts]" > "$D/inventory.ini"; echo "[" > "$D/hosts.json"
  for ((i=1;i<=n;i++)); do
    ip=$NET.$((10+i))
    echo "$ip $(cut -d' ' -f1,2 "$D/hosts/$PFX$i/root/etc/ssh/ssh_host_ed25519_key.pub")" >> "$D/known_hosts"
    echo "$PFX$i ansible_host=$ip" >> "$D/inventory.ini"
    printf '  {"name": "%s%d", "host": "%s", "port": 22, "user": "root"}%s\n' "$PFX" $i "$ip" "$( ((i<n)) && echo ,)" >> "$D/hosts.json"
    printf 'Host %s%d\n  HostName %s\n  User root\n  IdentityFile %s/id_ed25519\n  UserKnownHostsFile %s/known_hosts\n  StrictHostKeyChecking yes\n\n' \
      "$PFX" $i "$ip" "$D" "$D" >> "$D/ssh_config"
  done
  echo "]" >> "$D/hosts.json"
  cat >> "$D/inventory.ini" <<INV

[testhosts:vars]
ansible_user=root
ansible_ssh_private_key_file=$D/id_ed25519
ansible_ssh_common_args='-o UserKnownHostsFile=$D/known_hosts -o StrictHostKeyChecking=yes -o ControlMaster=auto -o ControlPersist=60s'
ansible_python_interpreter=/usr/bin/python3
INV
}

wait_ssh() {
  local n=$1 i t
  for ((i=1;i<=n;i++)); do
    for t in $(seq 300); do   # up to 30 s per host
      if timeout 1 bash -c "exec 3<>/dev/tcp/$NET.$((10+i))/22" 2>/dev/null; then continue 2; fi
      sleep 0.1
    done
    log "$PFX$i: sshd not up"; tail -20 "$D/hosts/$PFX$i/console.log" >&2; exit 1
  done
  [[ $MODE == nspawn ]] || return 0
  # sshd answers before systemd has finished booting, and until systemd-user-sessions has run,
  # /run/nologin makes PAM refuse every user but root. A unit that failed to start on a loaded
  # machine (e.g. a fork refused) would leave that file for good: failed units get one more start.
  # A unit that fails again is reported, not fatal: what the tests need is a finished boot and
  # logins for every user.
  local state
  for ((i=1;i<=n;i++)); do
    state=$(timeout 120 ssh -F "$D/ssh_config" -o BatchMode=yes "$PFX$i" '
      s=$(systemctl is-system-running --wait 2>/dev/null)
      if [ "$s" = degraded ]; then
        u=$(systemctl list-units --state=failed --plain --no-legend | cut -d" " -f1)
        echo "[testhosts] $(hostname): failed at boot: $u (starting again)" >&2
        systemctl reset-failed; systemctl start $u || true
        s=$(systemctl is-system-running 2>/dev/null)
      fi
      [ -e /run/nologin ] && s="$s, /run/nologin"; echo "$s"' || true)
    [[ $state == running || $state == degraded ]] && continue
    log "$PFX$i: not booted (${state:-no answer})"
    ssh -F "$D/ssh_config" -o BatchMode=yes "$PFX$i" 'systemctl list-jobs --no-pager; systemctl --failed --no-pager' >&2 || true
    exit 1
  done
}

up() {
  local n=${1:-4} i
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || { log "N must be 1..200"; exit 1; }
  deps; base; keys; net_up
  for ((i=1;i<=n;i++)); do start_host $i "$n"; done
  write_outputs "$n"; wait_ssh "$n"
  log "up: $n hosts ($MODE); inventory $D/inventory.ini"
}

down() {
  local H n pids=()
  for H in "$D"/hosts/"$PFX"*; do
    [[ -d $H && -f $H/pid ]] || continue
    if [[ $(cat "$H/mode" 2>/dev/null) == nspawn ]]; then kill -TERM "$(cat "$H/pid")" 2>/dev/null || true   # clean poweroff
    else kill -KILL "$(cat "$H/pid")" 2>/dev/null || true; fi
    pids+=("$(cat "$H/pid")")
  done
  local p t
  for p in "${pids[@]}"; do
    for t in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  for H in "$D"/hosts/"$PFX"*; do
    [[ -d $H ]] || continue
    n=$(basename "$H")
    ip netns pids "$n" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    for t in $(seq 50); do [[ -z $(ip netns pids "$n" 2>/dev/null) ]] && break; sleep 0.1; done
    if mountpoint -q "$H/root"; then umount "$H/root" 2>/dev/null || umount -l "$H/root"; fi
    ip link del "$n-h" 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
    rm -rf "$H"
  done
  if [[ -f $D/proxy.pid ]]; then kill "$(cat "$D/proxy.pid")" 2>/dev/null || true; rm -f "$D/proxy.pid"; fi
  ip link del "$BR" 2>/dev/null || true
  log "down"
}

status() {
  local H n
  for H in "$D"/hosts/"$PFX"*; do [[ -d $H ]] || continue
    n=$(basename "$H"); echo "$n $(cat "$H/mode" 2>/dev/null) pids: $(ip netns pids "$n" 2>/dev/null | wc -l)"
  done
}

[[ $(id -u) == 0 ]] || { echo "needs root" >&2; exit 1; }
case ${1:-} in
  up) up "${2:-4}";; down) down;; status) status;; base) deps; base;;
  clean) down; rm -rf "$BASE" "$BASE.tmp" "$D";;
  *) echo "usage: $0 up [N] | down | status | base | clean" >&2; exit 2;;
esac
