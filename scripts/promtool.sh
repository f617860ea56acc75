#!/usr/bin/env bash
# promtool (Prometheus' rule checker and rule unit-test runner) for tests/unit/test_monitoring_docs.py,
# unpacked from Debian's `prometheus` package without installing it (no root, no service, no dpkg state).
#
#   scripts/promtool.sh install   # apt-get download + dpkg -x -> $STATE_DIR/promtool/bin/promtool
#   scripts/promtool.sh path      # prints that path (exit 1 when not installed)
#
# Idempotent: a marker naming the package version skips the download when promtool is there and runs.
# Only promtool is kept (the package's prometheus server binary is not needed). The folder sits in the
# git-ignored state folder, like the MySQL binaries (scripts/mysql.sh).
# Environment: GTIDSNAP_STATE_DIR (see lib.sh), PROMETHEUS_DEB_VERSION (default: apt's candidate).
# shellcheck source=scripts/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

PROMTOOL_DIR="$STATE_DIR/promtool"
PROMTOOL="$PROMTOOL_DIR/bin/promtool"
MARKER="$PROMTOOL_DIR/.gtidsnap-installed"   # "prometheus=<version>" then promtool's first --version line

installed() { [[ -s "$MARKER" && -x "$PROMTOOL" ]] && "$PROMTOOL" --version >/dev/null 2>&1; }

cmd_install() {
  # One installer at a time (setup, a CI step and a developer may all call this).
  exec 9>"$STATE_DIR/promtool.lock"
  flock 9
  if installed; then
    log "promtool: already installed: $(tail -n 1 "$MARKER")"; return 0
  fi
  local version=${PROMETHEUS_DEB_VERSION:-} tmp deb
  if [[ -z "$version" ]]; then
    version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
  fi
  [[ -n "$version" && "$version" != "(none)" ]] \
    || die "promtool: apt knows no candidate for Debian package prometheus (run apt-get update, or set PROMETHEUS_DEB_VERSION)"
  tmp=$(mktemp -d "$STATE_DIR/promtool.tmp.XXXXXX")
  trap "rm -rf '$tmp'" EXIT   # expanded now: $tmp is local
  chmod 755 "$tmp"   # apt-get download drops privileges to _apt when it can write here
  log "promtool: downloading Debian package prometheus=$version"
  (cd "$tmp" && apt-get download -qq "prometheus=$version" >"$tmp/download.log" 2>&1) \
    || die "promtool: apt-get download prometheus=$version failed: $(tail -n 5 "$tmp/download.log")"
  deb=$(find "$tmp" -maxdepth 1 -name 'prometheus_*.deb' | head -n 1)
  [[ -n "$deb" ]] || die "promtool: apt-get download left no prometheus_*.deb"
  dpkg -x "$deb" "$tmp/root" || die "promtool: dpkg -x $(basename "$deb") failed"
  [[ -x "$tmp/root/usr/bin/promtool" ]] || die "promtool: $(basename "$deb") has no usr/bin/promtool"
  mkdir -p "$tmp/dist/bin"
  mv "$tmp/root/usr/bin/promtool" "$tmp/dist/bin/promtool"
  if [[ -f "$tmp/root/usr/share/doc/prometheus/copyright" ]]; then
    cp "$tmp/root/usr/share/doc/prometheus/copyright" "$tmp/dist/copyright"
  fi
  "$tmp/dist/bin/promtool" --version >"$tmp/version.txt" 2>&1 \
    || die "promtool: the unpacked binary does not run: $(cat "$tmp/version.txt")"
  printf 'prometheus=%s\n%s\n' "$version" "$(head -n 1 "$tmp/version.txt")" >"$tmp/dist/.gtidsnap-installed"
  rm -rf "$PROMTOOL_DIR"
  mv "$tmp/dist" "$PROMTOOL_DIR"
  rm -rf "$tmp"; trap - EXIT
  log "promtool: installed $PROMTOOL ($(tail -n 1 "$MARKER"))"
}

cmd_path() {
  installed || { log "promtool: not installed (run scripts/setup or scripts/promtool.sh install)"; exit 1; }
  printf '%s\n' "$PROMTOOL"
}

case "${1:-}" in
  install) cmd_install ;;
  path) cmd_path ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
