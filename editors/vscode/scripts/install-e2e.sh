#!/usr/bin/env bash
# Idempotently install what the VS Code e2e test needs:
#   - Debian packages: chromium (driven by playwright-core), ripgrep, build tools for code-server's native modules
#   - code-server (= VS Code 1.100.3) from the npm registry, into $CS_DIR (default /work/.cache/code-server)
# Prints the code-server binary path on the last line of stdout.
set -euo pipefail

CS_VERSION="${CS_VERSION:-4.100.3}"
CS_DIR="${CS_DIR:-/work/.cache/code-server}"
CS_BIN="$CS_DIR/node_modules/.bin/code-server"

log() { echo "[install-e2e] $*" >&2; }

need_apt=()
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v rg >/dev/null 2>&1 || need_apt+=(ripgrep)
command -v make >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 || need_apt+=(build-essential)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_apt+=(libkrb5-dev)
if [ "${#need_apt[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  log "apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >&2
fi

installed_version() {
  node -e "try{console.log(require('$CS_DIR/node_modules/code-server/package.json').version)}catch(e){}" 2>/dev/null || true
}

# code-server's postinstall installs VS Code's own node_modules (incl. ripgrep); a failed postinstall leaves the
# binary but not this file.
CS_COMPLETE="$CS_DIR/node_modules/code-server/lib/vscode/node_modules/@vscode/ripgrep/bin/rg"

if [ -x "$CS_BIN" ] && [ -x "$CS_COMPLETE" ] && [ "$(installed_version)" = "$CS_VERSION" ]; then
  log "code-server $CS_VERSION already installed in $CS_DIR"
else
  log "installing code-server $CS_VERSION into $CS_DIR (takes ~1 min)"
  export TMPDIR="${TMPDIR:-/tmp}"
  # @vscode/ripgrep's postinstall downloads rg from GitHub unless a cached tarball exists under os.tmpdir().
  RG_CACHE="$TMPDIR/vscode-ripgrep-cache-1.15.11"
  RG_TGZ="$RG_CACHE/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"
  if [ ! -f "$RG_TGZ" ]; then
    mkdir -p "$RG_CACHE" "$TMPDIR/rgpkg"
    cp "$(command -v rg)" "$TMPDIR/rgpkg/rg"
    tar -C "$TMPDIR/rgpkg" -czf "$RG_TGZ" rg
  fi
  mkdir -p "$CS_DIR"
  cd "$CS_DIR"
  [ -f package.json ] || echo '{}' > package.json
  rm -rf node_modules/code-server
  # As root, code-server's postinstall insists on unsafe-perm (npm >= 7 no longer knows the flag, so set the env).
  npm_config_unsafe_perm=true npm_config_yes=true npm_config_nodedir=/usr \
    npm install --no-audit --no-fund "code-server@$CS_VERSION" >&2
fi

[ -x "$CS_BIN" ] && [ -x "$CS_COMPLETE" ] || { log "code-server install incomplete in $CS_DIR"; exit 1; }
echo "$CS_BIN"
