#!/usr/bin/env bash
# make buf-breaking-demo: shows that a renumbered field cannot pass.
# A copy of schemas/proto gets UserMicSessionClosed.mic_online_ms
# renumbered (7 -> 70), and buf breaking runs on it against the committed
# baseline (schemas/baseline.binpb), exactly as `make lint` runs it on the
# real files. The demo succeeds when buf refuses the change, printing
# buf's own message; it fails if buf let it through.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=${BUF:-bin/buf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/schemas"
cp -r schemas/proto "$tmp/schemas/proto"
cp buf.yaml "$tmp/"
sed -i 's/^  int64 mic_online_ms = 7;/  int64 mic_online_ms = 70;/' "$tmp/schemas/proto/hyapp/user/v1/mic.proto"
if cmp -s schemas/proto/hyapp/user/v1/mic.proto "$tmp/schemas/proto/hyapp/user/v1/mic.proto"; then
  echo "buf-breaking-demo: the renumbering did not apply (mic.proto changed?)" >&2
  exit 1
fi
echo "renumbered UserMicSessionClosed.mic_online_ms 7 -> 70 in a copy; buf breaking against schemas/baseline.binpb says:"
if (cd "$tmp" && $BUF breaking --against "$OLDPWD/schemas/baseline.binpb"); then
  echo "buf-breaking-demo: FAILED: buf accepted a renumbered field" >&2
  exit 1
fi
echo "buf-breaking-demo: refused, as it must be"
