#!/usr/bin/env bash
# The OS packages that `make test` needs on a fresh Debian or Ubuntu machine (run as root):
# python3-venv for the virtualenv, and for the SSH test hosts (Debian 12 and 13) debootstrap, systemd-nspawn,
# tinyproxy, iproute2 and the OpenSSH client; squid for the fleet cache. Installs only what is missing.
set -euo pipefail
need=()
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
command -v make >/dev/null || need+=(make)
command -v git >/dev/null || need+=(git)
command -v cc >/dev/null || need+=(gcc)   # the stand-in NVML library is compiled by the tests
# the stand-in NVIDIA apt repository the role tests build and sign
command -v dpkg-scanpackages >/dev/null || need+=(dpkg-dev)
command -v gpg >/dev/null || need+=(gpg)
command -v objcopy >/dev/null || need+=(binutils)
command -v debootstrap >/dev/null || need+=(debootstrap)
# the Debian 13 test hosts: debootstrap's trixie script (bookworm's debootstrap has it) and the
# archive's trixie keys (debian-archive-keyring 2023.3+deb12u2 on bookworm carries them)
[[ -e /usr/share/debootstrap/scripts/trixie ]] || need+=(debootstrap)
grep -qa '13/trixie' /usr/share/keyrings/debian-archive-keyring.gpg 2>/dev/null || need+=(debian-archive-keyring)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v tinyproxy >/dev/null || need+=(tinyproxy)
command -v ip >/dev/null || need+=(iproute2)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
command -v chromium >/dev/null || need+=(chromium)   # report.html is looked at in a headless browser
[[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]] || need+=(fonts-dejavu-core)   # the charts' text widths are checked against it
command -v patchelf >/dev/null || need+=(patchelf)   # the stand-in standalone CPython is relocated as python-build-standalone is
[[ -x /usr/sbin/squid ]] || command -v squid >/dev/null || need+=(squid)   # the fleet cache's proxy
command -v shellcheck >/dev/null || need+=(shellcheck)   # the probe script (provision/remote/snippets/probe.sh) is shellchecked
((${#need[@]})) || exit 0
if [[ $(id -u) != 0 ]]; then
  echo "error: missing OS packages: ${need[*]} (install them as root: apt-get install ${need[*]})" >&2
  exit 2
fi
echo "[deps] apt-get install ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get install -y -q "${need[@]}" >/dev/null
}
