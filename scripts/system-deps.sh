#!/usr/bin/env bash
# Installs the Debian packages the service and its tests run for real, when missing.
# redis-server: the production store; prometheus: scrape tests; bubblewrap: sandbox jail; g++: cpp rewards.
# podman + runc (+ CNI plugins, uidmap for user-namespaced pods): the pod-runtime tier (tests/pods)
# and `make images`; mmdebstrap: the local Debian base images; openssl: the tier's API-server TLS.
# node-typescript (brings nodejs): the typescript language, transpiled with TypeScript's own
# transpileModule as SandboxFusion's tsx runs it (no type definitions needed; docs/sandbox.md).
# The language runtimes of languages.yaml (the same list the worker image ships,
# sandbox/packages/worker.txt): the host-jail language tests run each one (~1.8 GB installed).
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v prometheus >/dev/null || need+=(prometheus)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v g++ >/dev/null || need+=(g++)
command -v tsc >/dev/null || need+=(node-typescript)
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v newuidmap >/dev/null || need+=(uidmap)
command -v openssl >/dev/null || need+=(openssl)
# Looked up where the jail looks (its PATH), not on this shell's: a runtime installed for one
# user elsewhere (rustup's ~/.cargo/bin, say) is invisible to the jailed programs.
while read -r cmd pkg; do
  PATH=/usr/local/bin:/usr/bin:/bin command -v "$cmd" >/dev/null || need+=("$pkg")
done <<'EOF'
gcc gcc
javac openjdk-17-jdk-headless
go golang-go
rustc rustc
node nodejs
php php-cli
ruby ruby
lua5.4 lua5.4
perl perl
Rscript r-base-core
scalac scala
kotlinc kotlin
mcs mono-mcs
mono mono-runtime
gdc gdc
racket racket
promtool prometheus
EOF
[ -x /usr/lib/cni/bridge ] || [ -x /usr/libexec/cni/bridge ] || command -v netavark >/dev/null || need+=(containernetworking-plugins)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
