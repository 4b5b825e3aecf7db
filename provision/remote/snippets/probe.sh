#!/bin/sh
# provision probe: the facts of one host, in sections (@@provision-section NAME@@) that
# provision/hosts/gather.py splits and parses. Shipped with the package and sent as it is: run as
#   env PROVISION_...=... sh -c "$(cat probe.sh)" provision-probe PART...
# PART: main (what any user may read) and/or root (what needs root). Parameters come as environment
# variables, set by gather.py's probe_env (one home for each value it passes):
#   PROVISION_DPKG_FORMAT   dpkg-query's format (parse_dpkg_query reads exactly it)
#   PROVISION_UPGRADE_UNITS systemd units of automatic upgrades, space-separated
#   PROVISION_RUNTIMES      container runtime commands, space-separated
#   PROVISION_IMDS_ENDPOINT the EC2 metadata service ("": not asked); PROVISION_IMDS_ASK always|ec2
#   PROVISION_VENV_PYTHON   the venv's python whose frameworks are read ("": none)
#   PROVISION_LOCK_FILES    fcntl:PATH and pid:PATH words for the package-lock check (root part)
#   PROVISION_HEALTH_SPEC   provision-health's spec file; PROVISION_HEALTH_DIR its program's folder
#   PROVISION_*_PY          the Python snippets (provision/remote/snippets/*.py) as text
# Nothing here may need more than POSIX sh and what a minimal OS image has.
# SC2010 (ls | grep): the names listed are apt's list files and python binaries, plain names.
# shellcheck disable=SC2010
export LC_ALL=C PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin:/usr/local/cuda/bin"
sec() { printf '\n@@provision-section %s@@\n' "$1"; }
PY=$(command -v python3 || command -v /usr/libexec/platform-python || true)

# py PYTHON FLAGS PROGRAM [ARG...]: run a snippet given as text. FLAGS are words, split on purpose:
# -B never writes bytecode on the host; -I -S for stdlib-only programs (no site-packages to scan,
# no PYTHON* variables of the login to honour).
py() {
  _python=$1 _flags=$2 _program=$3
  shift 3
  # shellcheck disable=SC2086
  printf '%s\n' "$_program" | "$_python" $_flags - "$@"
}

main_facts() {
  sec id; id -un; id -u
  sec hostname; hostname 2>/dev/null || cat /etc/hostname
  sec os_release; cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release
  sec uname; uname -r; uname -m
  sec lspci; command -v lspci >/dev/null && lspci -nn 2>/dev/null
  sec sysfs_pci
  if ! command -v lspci >/dev/null; then
    (cd /sys/bus/pci/devices 2>/dev/null && grep -H . ./*/class ./*/vendor ./*/device 2>/dev/null)
  fi
  sec proc_modules; cat /proc/modules 2>/dev/null
  sec proc_driver; cat /proc/driver/nvidia/version 2>/dev/null
  sec modinfo; modinfo nvidia 2>/dev/null
  sec dpkg
  command -v dpkg-query >/dev/null && dpkg-query -W -f="$PROVISION_DPKG_FORMAT" \
    'nvidia-*' 'libnvidia-*' 'cuda-*' 'libcudnn*' 'cudnn*' 'linux-headers-*' 2>/dev/null
  sec rpm
  command -v rpm >/dev/null && rpm -qa --qf '%{NAME}\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\n' \
    'nvidia*' 'kmod-nvidia*' 'cuda*' 'libcudnn*' 'kernel-devel*' 2>/dev/null
  sec headers_build; [ -e "/lib/modules/$(uname -r)/build" ] && echo yes || echo no
  sec apt_headers
  if command -v apt-cache >/dev/null; then
    set -- /var/lib/apt/lists/*_Packages
    if [ -e "$1" ]; then
      # apt keeps its lists uncompressed by default: a fixed-string scan of them costs a fifth of
      # the CPU of apt-cache, which counts when many probed hosts share a machine's CPUs.
      echo "@@lists yes"
      grep -q -x -F "Package: linux-headers-$(uname -r)" "$@" && echo "@@listed yes" || echo "@@listed no"
    elif ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages'; then
      echo "@@lists yes"; apt-cache policy "linux-headers-$(uname -r)" 2>/dev/null
    else
      echo "@@lists no"
    fi
  fi
  # Ubuntu's distro driver: Canonical's precompiled modules for the running kernel fix the driver
  # version, and the archive keeps only the newest of each package, so the host's own index says
  # which version the plan can hold (provision/stack/distro_versions.py reads these facts).
  sec ubuntu_driver_index
  if [ -r /etc/os-release ] && grep -qx 'ID=ubuntu' /etc/os-release && command -v apt-cache >/dev/null; then
    k=$(uname -r)
    ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages' && echo "@@lists yes" || echo "@@lists no"
    echo "@@images"
    dpkg-query -W -f="$PROVISION_DPKG_FORMAT" 'linux-image-*' 2>/dev/null
    mods=$(apt-cache pkgnames linux-modules-nvidia- 2>/dev/null | grep -e "-server-$k\$" -e "-server-open-$k\$" | sort)
    if [ -n "$mods" ]; then
      echo "@@show"
      # package names, one a line: split on purpose
      # shellcheck disable=SC2086
      apt-cache show --no-all-versions $mods 2>/dev/null
      echo "@@policy"
      for b in $(echo "$mods" | sed -n 's/^linux-modules-nvidia-\([0-9]*\)-server.*/\1/p' | sort -u); do
        echo "nvidia-headless-no-dkms-$b-server nvidia-headless-no-dkms-$b-server-open"
        echo "nvidia-headless-$b-server nvidia-headless-$b-server-open nvidia-utils-$b-server"
      done | xargs apt-cache policy 2>/dev/null
    fi
  fi
  sec dnf_headers
  if command -v dnf >/dev/null; then
    timeout 30 dnf -q --cacheonly list --available "kernel-devel-$(uname -r)" 2>&1; echo "@@rc $?"
  fi
  sec efi; [ -d /sys/firmware/efi ] && echo yes || echo no
  sec mokutil; command -v mokutil >/dev/null && mokutil --sb-state 2>&1
  sec efivar_sb
  for f in /sys/firmware/efi/efivars/SecureBoot-*; do [ -r "$f" ] && od -An -tu1 "$f" 2>/dev/null; break; done
  sec nvidia_smi; command -v nvidia-smi >/dev/null && timeout 60 nvidia-smi -q -x 2>/dev/null
  sec nvml
  if ! command -v nvidia-smi >/dev/null && [ -n "$PY" ] && \
     { [ -n "${LD_LIBRARY_PATH:-}" ] || ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1'; }; then
    py "$PY" -B "$PROVISION_NVML_PY"
  fi
  sec cuda_dirs
  for d in /usr/local/cuda-*; do
    [ -d "$d" ] || continue
    for f in "$d/version.json" "$d/version.txt"; do [ -f "$f" ] && { echo "@@file $d"; cat "$f"; break; }; done
  done
  sec nvcc; command -v nvcc && nvcc --version 2>/dev/null
  sec cudnn_header
  for f in /usr/include/cudnn_version.h /usr/include/*-linux-gnu/cudnn_version*.h \
           /usr/local/cuda/include/cudnn_version.h; do
    [ -f "$f" ] && { echo "@@file $f"; grep -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL)' "$f"; break; }
  done
  sec python; [ -n "$PY" ] && "$PY" --version 2>&1
  sec pythons; ls /usr/bin /usr/local/bin 2>/dev/null | grep -E '^python[0-9]+\.[0-9]+$'
  sec df; df -P -k / /var 2>/dev/null
  sec meminfo; cat /proc/meminfo 2>/dev/null
  sec nproc; nproc 2>/dev/null || getconf _NPROCESSORS_ONLN
  sec units
  # The unit names are words (UPGRADE_UNITS in gather.py): split on purpose.
  # shellcheck disable=SC2086
  command -v systemctl >/dev/null && systemctl is-active $PROVISION_UPGRADE_UNITS 2>/dev/null
  sec processes; ps -eo comm= 2>/dev/null
  sec apt_periodic
  [ -d /etc/apt ] && grep -hs 'APT::Periodic::Unattended-Upgrade' /etc/apt/apt.conf /etc/apt/apt.conf.d/*
  sec runtimes; for t in $PROVISION_RUNTIMES; do c=$(command -v "$t") && echo "$t $c"; done
  sec imds
  # PROVISION_IMDS_ENDPOINT empty: not asked; PROVISION_IMDS_ASK "ec2": only where DMI says EC2.
  if [ -n "$PROVISION_IMDS_ENDPOINT" ] && [ -n "$PY" ]; then
    if [ "$PROVISION_IMDS_ASK" = always ] || grep -qis -e amazon -e '^ec2' /sys/class/dmi/id/sys_vendor \
         /sys/class/dmi/id/bios_vendor /sys/hypervisor/uuid 2>/dev/null; then
      py "$PY" "-B -I -S" "$PROVISION_IMDS_PY" "$PROVISION_IMDS_ENDPOINT"
    fi
  fi
  sec health
  # provision-health as `up` installed it (the health role's 0644 files): its spec, then each
  # program file's sha256; `up` applies a host again when either is not what it would install.
  if [ -n "$PROVISION_HEALTH_DIR" ]; then
    [ -r "$PROVISION_HEALTH_SPEC" ] && { echo "@@spec"; cat "$PROVISION_HEALTH_SPEC"; echo; }
    echo "@@files"
    (cd "$PROVISION_HEALTH_DIR" 2>/dev/null && sha256sum -- *.py 2>/dev/null)
  fi
  sec venv
  if [ -n "$PROVISION_VENV_PYTHON" ] && [ -x "$PROVISION_VENV_PYTHON" ]; then
    py "$PROVISION_VENV_PYTHON" -B "$PROVISION_VENV_PY"
  fi
}

root_facts() {
  sec locks
  # The lock files are words (preflight's package_locks.json has no spaces): split on purpose.
  # shellcheck disable=SC2086
  [ -n "$PY" ] && py "$PY" "-B -I -S" "$PROVISION_LOCKS_PY" $PROVISION_LOCK_FILES
}

for part in "$@"; do
  case $part in
    main) main_facts ;;
    root) root_facts ;;
    *) echo "probe.sh: unknown part $part (main, root)" >&2; exit 2 ;;
  esac
done
