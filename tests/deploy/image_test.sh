#!/usr/bin/env bash
# The OCI image (deploy/image/Containerfile, built by scripts/build-image) runs `tessera serve`, answers /health
# and a completion under `podman run`, and carries etcd. Skips (exit 77) with the precise reason where the
# machine cannot run it: no podman, not root, podman unusable, the image not built, or built from another binary.
set -uo pipefail
cd "$(dirname "$0")/../.."
version="${TESSERA_IMAGE_VERSION:-0.1}"
image="localhost/tessera:$version"
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

command -v podman >/dev/null || skip "podman is not installed (opt-in: apt-get install podman buildah debootstrap; bash scripts/build-image)"
[ "$(id -u)" = 0 ] || skip "needs root (rootful podman with host networking); running as uid $(id -u)"
if ! out="$(podman info 2>&1 >/dev/null)"; then skip "podman cannot run containers here: $(echo "$out" | head -1)"; fi
podman image exists "$image" || skip "the image $image is not built: bash scripts/build-image (opt-in; minutes)"
# How containers run here: podman's defaults, else runc with limits this process may set. (On a machine
# without CAP_SYS_RESOURCE and with hybrid cgroups, crun refuses podman's default rlimits and the cgroup
# layout; runc with nofile/nproc at or under the current hard limits works.)
run_opts=()
if ! err="$(podman run --rm --network host --entrypoint /bin/true "$image" 2>&1)"; then
  alt=(--ulimit "nofile=$(ulimit -n):$(ulimit -Hn)" --ulimit "nproc=4096:4096")
  command -v runc >/dev/null && alt=(--runtime runc "${alt[@]}")
  if ! err2="$(podman run --rm --network host "${alt[@]}" --entrypoint /bin/true "$image" 2>&1)"; then
    skip "podman cannot start a container here: $(echo "$err" | tail -1); with ${alt[*]}: $(echo "$err2" | tail -1)"
  fi
  run_opts=("${alt[@]}")
fi
want="$(sha256sum build/release/bin/tessera | cut -d' ' -f1)"
have="$(podman run --rm "${run_opts[@]}" --entrypoint /usr/bin/sha256sum "$image" /usr/bin/tessera | cut -d' ' -f1)"
[ "$want" = "$have" ] || skip "$image holds another tessera binary than build/release/bin/tessera: rebuild it (bash scripts/build-image)"

name="tessera-image-test-$$"
trap 'podman rm -f "$name" >/dev/null 2>&1' EXIT
podman run -d --name "$name" --network host "${run_opts[@]}" "$image" serve --host 127.0.0.1 --port 0 \
  --model /usr/share/tessera/models/stories260K --served-model-name stories260K >/dev/null || fail "podman run failed"
port=""
for _ in $(seq 1 300); do
  port="$(podman logs "$name" 2>/dev/null | sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' | head -1)"
  [ -n "$port" ] && break
  sleep 0.2
done
[ -n "$port" ] || fail "tessera serve in the container never said it was listening: $(podman logs "$name" 2>&1 | tail -5)"

# One HTTP exchange over bash's /dev/tcp (no curl in the CI package list).
http() {  # METHOD PATH [BODY]
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$1" "$2" "${#3}" "$3" >&3
  cat <&3
  exec 3<&-
}
health="$(http GET /health "")"
echo "$health" | head -1 | grep -q "200" || fail "/health did not answer 200: $(echo "$health" | head -1)"
completion="$(http POST /v1/completions '{"model":"stories260K","prompt":"Once upon a time","max_tokens":8,"temperature":0}')"
echo "$completion" | head -1 | grep -q "200" || fail "a completion failed: $(echo "$completion" | tail -1)"
echo "$completion" | grep -q '"text"' || fail "a completion without text: $(echo "$completion" | tail -1)"
podman run --rm "${run_opts[@]}" --entrypoint /usr/bin/etcd "$image" --version | grep -q "etcd Version: 3.4" || fail "no etcd 3.4 in the image"
echo "image $image: /health 200, a completion answered, etcd 3.4 inside"
