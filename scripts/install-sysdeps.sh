#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo need, when they are missing.
# Run as root (CI and fresh machines); as another user it only reports what is missing.
set -euo pipefail

need=()
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v make >/dev/null 2>&1 || need+=(make)
# Spark (spark_pipeline/ and its tests) runs on a Java 17+ runtime; nothing else of it is a system package.
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1 || true)
[ "${java_major:-0}" -ge 17 ] 2>/dev/null || need+=(openjdk-17-jre-headless)
# The web monitor's tests render its pages in headless Chromium; a font so the screenshots have text.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
# The TLS peer-link tests make their certificates with the openssl command.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# A peer-link test takes an interface's address away inside a network namespace of its own (unshare -n).
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
# The systemd unit's test runs `systemd-analyze verify` (no running systemd needed).
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${need[*]} (run 'sudo $0' or install them yourself)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer before it asks.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
