#!/usr/bin/env bash
# Smoke test of the built binary: starts it with the example config on
# 127.0.0.1, waits until the gateway answers, runs the curl checks that the
# README also shows, and always stops the server on exit.
#
#   scripts/smoke.sh          (after `make build`)
#
# Overridable: SWITCHYARD_BIN, SWITCHYARD_CONFIG, SWITCHYARD_URL,
# SWITCHYARD_EXAMPLE_KEY, SMOKE_WAIT_SECONDS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=${SWITCHYARD_BIN:-bin/switchyard}
config=${SWITCHYARD_CONFIG:-Caddyfile.example}
base_url=${SWITCHYARD_URL:-http://127.0.0.1:8080}
wait_seconds=${SMOKE_WAIT_SECONDS:-60}
: "${SWITCHYARD_EXAMPLE_KEY:=sk-sy-demo-0000000000000000}"

say() { printf 'smoke: %s\n' "$*"; }
[ -x "$bin" ] || { say "no binary at $bin: run 'make build' first"; exit 1; }
[ -f "$config" ] || { say "no config at $config"; exit 1; }

# Answers with an HTTP status code, or 000 when nothing answered.
http_status() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" 2>/dev/null || true; }

if [ "$(http_status "$base_url/")" != 000 ]; then
	say "something already answers on $base_url; stop it first (make run?)"
	exit 1
fi

# A private home for Caddy's data and autosaved config, so the run neither
# depends on nor changes the user's state.
work=$(mktemp -d)
server_pid=
stop_server() {
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "starting $bin run --config $config --adapter caddyfile"
XDG_DATA_HOME="$work/data" XDG_CONFIG_HOME="$work/config" \
	"$bin" run --config "$config" --adapter caddyfile >"$work/server.log" 2>&1 &
server_pid=$!

show_log() { say "server log (last 50 lines):"; tail -n 50 "$work/server.log" | sed 's/^/  | /'; }

deadline=$((SECONDS + wait_seconds))
until [ "$(http_status "$base_url/")" != 000 ]; do
	if ! kill -0 "$server_pid" 2>/dev/null; then
		say "the server exited before answering"
		show_log
		exit 1
	fi
	if ((SECONDS >= deadline)); then
		say "no answer on $base_url within ${wait_seconds}s"
		show_log
		exit 1
	fi
	sleep 0.5
done
say "server answers on $base_url"

passed=0 failed=0
# check NAME STATUS BODY_REGEX CURL_ARGS...: one request, its status and body.
check() {
	local name=$1 want_status=$2 want_body=$3
	shift 3
	local status
	status=$(curl -sS -o "$work/body" -w '%{http_code}' --max-time 10 "$@" 2>"$work/curl.err") || true
	if [ "$status" = "$want_status" ] && grep -Eq -- "$want_body" "$work/body"; then
		passed=$((passed + 1))
		say "PASS $name"
	else
		failed=$((failed + 1))
		say "FAIL $name: want HTTP $want_status and a body matching $want_body, got HTTP $status"
		sed 's/^/  | /' "$work/curl.err" "$work/body" | head -n 20
		echo
	fi
}

# The requests the README's "Try it" section shows, as printed there.
key=$SWITCHYARD_EXAMPLE_KEY
json=(-H 'Content-Type: application/json')
reply='Hello from the Switchyard simulator'
check "readiness while serving" 200 '"status" *: *"ready"' "$base_url/readyz"
check "GET /v1/models lists the models" 200 '"object" *: *"list"' \
	-H "Authorization: Bearer $key" "$base_url/v1/models"
check "chat completion" 200 "\"model\":\"sim-gpt\".*$reply|$reply.*\"model\":\"sim-gpt\"" \
	"$base_url/v1/chat/completions" -H "Authorization: Bearer $key" "${json[@]}" \
	-d '{"model":"sim-gpt","messages":[{"role":"user","content":"Hello"}]}'
check "chat completion, streamed" 200 'data: \[DONE\]' -N \
	"$base_url/v1/chat/completions" -H "Authorization: Bearer $key" "${json[@]}" \
	-d '{"model":"sim-gpt","stream":true,"messages":[{"role":"user","content":"Hello"}]}'
check "responses" 200 '"model":"sim-gpt"' \
	"$base_url/v1/responses" -H "Authorization: Bearer $key" "${json[@]}" \
	-d '{"model":"sim-gpt","input":"Hello","reasoning":{"effort":"low"}}'
check "responses, streamed" 200 'event: response.completed' -N \
	"$base_url/v1/responses" -H "Authorization: Bearer $key" "${json[@]}" \
	-d '{"model":"sim-gpt","input":"Hello","stream":true}'
check "messages" 200 '"model":"sim-claude"' \
	"$base_url/v1/messages" -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' "${json[@]}" \
	-d '{"model":"sim-claude","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}]}'
check "messages, streamed with thinking" 200 'event: message_stop' -N \
	"$base_url/v1/messages" -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' "${json[@]}" \
	-d '{"model":"sim-claude","max_tokens":4096,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Hello"}]}'
check "failover you cannot see" 200 '"model":"sim-failover"' \
	"$base_url/v1/chat/completions" -H "Authorization: Bearer $key" "${json[@]}" \
	-d '{"model":"sim-failover","messages":[{"role":"user","content":"Hello"}]}'
check "a model lacking the protocol fails at once" 503 'routing_no_available_channel' \
	"$base_url/v1/messages" -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' "${json[@]}" \
	-d '{"model":"sim-gpt","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}'
check "a wrong key is 401" 401 'invalid_api_key' \
	-H "Authorization: Bearer sk-not-a-real-key-000000" "$base_url/v1/models"
check "live health on the admin endpoint" 200 '"candidates"' "http://127.0.0.1:2019/switchyard/health"
# `caddy validate` provisions the configuration in a process of its own: it must not
# trip over the running gateway's store or usage journal.
if XDG_DATA_HOME="$work/data" XDG_CONFIG_HOME="$work/config" "$bin" validate --config "$config" --adapter caddyfile >"$work/validate.log" 2>&1; then
	passed=$((passed + 1))
	say "PASS caddy validate while the gateway runs"
else
	failed=$((failed + 1))
	say "FAIL caddy validate while the gateway runs"
	tail -n 5 "$work/validate.log" | sed 's/^/  | /'
fi
check "the console page" 200 '<html' "$base_url/console/"
check "the console's API asks who you are" 401 '"sign in first"' "$base_url/console/api/me"
check "the console's API, with the break-glass password" 200 '"kind":"break_glass"' -u admin:switchyard-demo "$base_url/console/api/me"
check "a wrong break-glass password opens nothing" 401 '' -u admin:not-it "$base_url/console/api/me"
check "a key created through the admin API" 201 '"secret":"sk-sy-' \
	-X POST "http://127.0.0.1:2019/switchyard/keys" -H 'Content-Type: application/json' -d '{"name":"smoke"}'
created_key=$(grep -o '"secret":"sk-sy-[a-z2-7]*"' "$work/body" | cut -d'"' -f4 || true)
check "the new key calls the gateway" 200 '"model":"sim-claude"' \
	"$base_url/v1/messages" -H "x-api-key: $created_key" -H 'anthropic-version: 2023-06-01' "${json[@]}" \
	-d '{"model":"sim-claude","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}'

# Requests that carry keys the log must not show, wherever a client may put one: in each
# header a key is sent in, in the query under a key's name and under any other, as a
# path segment, and percent-encoded; on the gateway's site, on a host name the example
# serves no site for (its catch-all site answers 404), and on the admin endpoint. Each
# probe is distinct so that a leak names where it came from.
probe_header=sk-sy-smokeprobe-header-5b1e9d0c
probe_bearer=sk-sy-smokeprobe-bearer-0f6a2c4e
probe_query=sk-sy-smokeprobe-query-8c4f2a7e
probe_other=sk-sy-smokeprobe-othername-1d7b3e5f
probe_path=sk-sy-smokeprobe-path-6e2a8d4b
probe_encoded=sk-sy-smokeprobe-encoded-3a9c7f1d
probe_named=smokeprobe-named-plain-4c8e2b6a # a static key need not start with sk-
# The encoded probe as a client library might escape it: s, k and - as %73 %6B %2D.
encoded_query="%73%6B%2D${probe_encoded#sk-}"
key_headers=(-H "x-api-key: $probe_header" -H "api-key: $probe_header" -H "x-goog-api-key: $probe_header"
	-H "Authorization: Bearer $probe_bearer")
check "a host the example serves no site for is 404" 404 'No site' \
	-H 'Host: unknown.example' "${key_headers[@]}" \
	"$base_url/v1/models?api_key=$probe_query&key=$probe_query&foo=$probe_other"
check "a host the example serves no site for, key in the path" 404 'No site' \
	-H 'Host: unknown.example' "$base_url/v1/$probe_path/models"
check "a key in the query string is refused" 400 '.' \
	-H "Authorization: Bearer $key" "$base_url/v1/models?api_key=$probe_query"
check "a value under a key's name in the query is refused" 400 '.' \
	-H "Authorization: Bearer $key" "$base_url/v1/models?Key=$probe_named"
check "a key in the query under another name is refused" 400 '.' \
	-H "Authorization: Bearer $key" "$base_url/v1/models?page=2&foo=$probe_other"
check "the gateway's own key in the query under another name is refused" 400 '.' \
	-H "Authorization: Bearer $key" "$base_url/v1/models?foo=$key"
check "a percent-encoded key in the query is refused" 400 '.' \
	-H "Authorization: Bearer $key" "$base_url/v1/models?foo=$encoded_query"
check "a key as a path segment is not found" 404 '.' \
	-H "Authorization: Bearer $key" "${json[@]}" "$base_url/v1/$probe_path/chat/completions" \
	-d '{"model":"sim-gpt","messages":[{"role":"user","content":"Hello"}]}'
check "keys in every key header are refused" 401 'invalid_api_key' \
	"${key_headers[@]}" "$base_url/v1/models"
check "the admin endpoint with keys in its URL" 404 '' \
	"${key_headers[@]}" "http://127.0.0.1:2019/switchyard/$probe_path?token=$probe_query&foo=$probe_other&bar=$encoded_query"

# Every line the server wrote: the requests above are there, and no key is.
log_check() {
	local name=$1 ok=$2
	if [ "$ok" = yes ]; then
		passed=$((passed + 1))
		say "PASS $name"
	else
		failed=$((failed + 1))
		say "FAIL $name"
	fi
}
# The entries of the requests above, their keys masked where they were: waiting for
# them makes the search below see every line.
seen=no
for _ in $(seq 50); do
	if grep -q '"host":"unknown.example"' "$work/server.log" &&
		grep -q '"switchyard_model":"sim-claude"' "$work/server.log" &&
		grep -qF '"uri":"/v1/REDACTED/chat/completions"' "$work/server.log" &&
		grep -qF '"uri":"/v1/models?page=2&foo=REDACTED"' "$work/server.log" &&
		grep -qF '"uri":"/v1/models?Key=REDACTED"' "$work/server.log" &&
		grep -qF '"uri":"/switchyard/REDACTED?token=REDACTED&foo=REDACTED&bar=REDACTED"' "$work/server.log"; then
		seen=yes
		break
	fi
	sleep 0.1
done
log_check "the log has every request above, keys masked in each URI" "$seen"
# Each key is looked for whole and without its sk- (which catches a key whose prefix
# was escaped and so escaped the mask).
leaked=
for secret in "$key" "$created_key" "$probe_header" "$probe_bearer" "$probe_query" "$probe_other" \
	"$probe_path" "$probe_encoded" "$probe_named" sim-upstream-secret; do
	[ -n "$secret" ] || continue
	if grep -qF -e "$secret" -e "${secret#sk-}" "$work/server.log"; then
		leaked="$leaked ${secret:0:22}…"
	fi
done
if [ -z "$leaked" ]; then
	log_check "no key in any of the server's $(wc -l <"$work/server.log") log lines" yes
else
	log_check "no key in the server's log lines (found:$leaked)" no
fi

((failed == 0)) || show_log
say "$passed passed, $failed failed"
((failed == 0))
