#!/usr/bin/env bash
# stack-depth.sh: how deep a held stream's handler goroutine goes, measured in a running
# gateway. The memory figure of issue 14 turns on it: Go gives a goroutine an 8 KiB stack
# only while every call it makes fits in about 7.2 KiB (the rest is the guard), and halves
# a grown stack only when less than a quarter of it is in use.
#
# It builds a Switchyard with symbols (bin/switchyard-symbols), runs the benchmark's memory
# phase (cleartext HTTP/2 clients, an HTTP/2 upstream over TLS) and, once streams open,
# attaches gdb for a while. It prints, for the points below, the deepest the handler's
# stack was seen (bytes from its top, including the named function's frame), and which
# functions grew a goroutine's stack from 8 to 16 KiB:
#   - the gateway's first handler (everything above it is Caddy's and net/http's),
#   - the HTTP/2 client waiting for the upstream's headers,
#   - one event being rewritten,
#   - the HTTP/2 server handing a flushed event to its connection.
#
#   scripts/stack-depth.sh [seconds to watch, default 40]
#
# Needs gdb (Debian: apt-get install gdb); nothing here runs in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
watch=${1:-40}
command -v gdb >/dev/null || { echo "stack-depth: needs gdb (apt-get install gdb)" >&2; exit 1; }

work=$(mktemp -d)
trap 'pkill -f "switchyard-symbols run" 2>/dev/null || true; rm -rf "$work" .xcaddy-symbols.json' EXIT

# The usual build strips symbols; gdb needs them. The manifest must sit beside xcaddy.json,
# whose plugin paths are relative to its folder.
manifest=.xcaddy-symbols.json
sed 's#"output": *"[^"]*"#"output": "bin/switchyard-symbols"#' xcaddy.json >"$manifest"
XCADDY_GO_BUILD_FLAGS=-trimpath go run ./internal/buildtool -manifest "$manifest" >"$work/build.log" 2>&1 ||
	{ rm -f "$manifest"; cat "$work/build.log" >&2; exit 1; }
rm -f "$manifest"
go build -o "$work/bench" ./bench

"$work/bench" -switchyard bin/switchyard-symbols -out "$work/bench.json" -limits '' -only memory \
	-mem-proxies switchyard -mem-upstreams h2 -mem-protocols h2c >"$work/bench.log" 2>&1 &
bench=$!
for _ in $(seq 1 900); do
	grep -q "opening streams" "$work/bench.log" && break
	sleep 0.1
done
pid=$(pgrep -f "switchyard-symbols run" | head -1 || true)
[ -n "$pid" ] || { cat "$work/bench.log" >&2; echo "stack-depth: the gateway did not start" >&2; exit 1; }

# R14 holds the running goroutine's g; its first two words are the stack's low and high
# ends. The breakpoints sit after each function's prologue, so SP includes its frame.
{
	echo 'set language c'
	echo 'set pagination off'
	echo 'set confirm off'
	for s in SIGURG SIGPIPE SIGPROF; do echo "handle $s nostop noprint pass"; done
	for f in \
		'github.com/switchyard-gw/switchyard/caddymodule.(*Auth).ServeHTTP' \
		'net/http.(*http2ClientConn).roundTrip' \
		'github.com/switchyard-gw/switchyard/protocols.(*EventStream).AppendRewritten' \
		'golang.org/x/net/http2.(*serverConn).writeDataFromHandler'; do
		printf "break '%s'\ncommands\nsilent\nprintf \"DEPTH %%d %s\\\\n\", *(long*)(\$r14+8) - (long)\$sp\ncontinue\nend\n" "$f" "$f"
	done
	echo "break 'runtime.morestack' if *(long*)(\$r14+8) - *(long*)(\$r14) == 8192"
	printf 'commands\nsilent\nprintf "GREW\\n"\nbt 40\ncontinue\nend\n'
	echo continue
} >"$work/cmds.gdb"
timeout "$watch" gdb -p "$pid" -batch -x "$work/cmds.gdb" >"$work/gdb.log" 2>&1 || true
kill "$bench" 2>/dev/null || true
wait "$bench" 2>/dev/null || true
pkill -f "switchyard-symbols run" 2>/dev/null || true

echo "deepest seen (bytes from the stack's top, the function's frame included), hits:"
awk '/^DEPTH/ { if ($2 > max[$3]) max[$3] = $2; n[$3]++ }
	END { for (f in max) printf "  %6d  %6d  %s\n", max[f], n[f], f }' "$work/gdb.log" | sort -n
echo "functions that grew a goroutine's stack from 8 to 16 KiB (the frame that did not fit <- its caller), count:"
awk '/^GREW/ { grew = 1; next }
	grew && /^#1 / { f1 = ($3 == "in") ? $4 : $2; next }
	grew && /^#2 / { f2 = ($3 == "in") ? $4 : $2; n[f1 " <- " f2]++; grew = 0 }
	END { for (k in n) printf "  %6d  %s\n", n[k], k }' "$work/gdb.log" | sort -rn | head -12
