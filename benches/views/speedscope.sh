#!/usr/bin/env bash
# Opens a trace's Chrome JSON export in a real viewer, in a real browser: speedscope (installed by
# scripts/setup.sh) in headless Chromium, and takes a screenshot. Fails when the page does not
# import the file or the viewer reports events that do not nest (its "Tried to end ..." messages:
# what a mis-ordered flow child caused before), or the page throws.
# Usage: benches/views/speedscope.sh TRACE_DIR OUT.png [export flags...]   (after cargo build --release)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 TRACE_DIR OUT.png [export flags...]" >&2; exit 2; }
trace=$1; png=$2; shift 2
viewer=/var/cache/evenflush/speedscope/node_modules/speedscope/dist/release
[ -f "$viewer/index.html" ] || { echo "speedscope not installed: run scripts/setup.sh" >&2; exit 1; }
command -v chromium >/dev/null || { echo "chromium not installed: run scripts/setup.sh" >&2; exit 1; }
site=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$site"' EXIT
cp -r "$viewer/." "$site/"
"${CARGO_TARGET_DIR:-$root/target}/release/evenflush" export --format chrome-json --out "$site/trace.json" "$trace" "$@" >&2
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$site" && exec /usr/bin/python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1) &
server=$!
for _ in $(seq 50); do
  /usr/bin/python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/index.html')" 2>/dev/null && break
  sleep 0.1
done
log="$site/console.log"
# Software WebGL (SwiftShader): speedscope draws with WebGL, and there is no GPU here.
timeout 120 chromium --headless=new --no-sandbox --use-angle=swiftshader --enable-unsafe-swiftshader \
  --hide-scrollbars --window-size=1600,900 --virtual-time-budget=15000 --enable-logging=stderr --v=0 \
  --user-data-dir="$site/profile" --screenshot="$png" \
  "http://127.0.0.1:$port/index.html#profileURL=http://127.0.0.1:$port/trace.json" 2>"$log" >/dev/null || true
console=$(grep 'CONSOLE' "$log" || true)
if ! grep -q '"import: ' <<<"$console"; then
  echo "speedscope did not import the export; console:" >&2; echo "$console" >&2; exit 1
fi
if grep -Eq 'Tried to end|Uncaught|went wrong' <<<"$console"; then
  echo "speedscope found events that do not nest, or failed:" >&2
  grep -E 'Tried to end|Uncaught|went wrong' <<<"$console" | head -5 >&2; exit 1
fi
[ -s "$png" ] || { echo "no screenshot written" >&2; exit 1; }
echo "speedscope imported $(grep -o '"import: [0-9.]* ms"' <<<"$console"); screenshot $png"
