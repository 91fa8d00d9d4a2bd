#!/usr/bin/env bash
# Fault-injection suite (issue 11): every scenario under streamed greedy load, with exact token accounting
# against a fault-free reference run (`tessera fault-load`). Writes a markdown report (docs/faults.md by
# default) and exits non-zero when a scenario with redundancy lost a request or a token, or took more than 3 s
# to recover, or when a scenario without redundancy failed uncleanly.
#
#   scripts/fault-suite.sh            8 clients x 100 requests x 32 tokens per scenario -> docs/faults.md
#   scripts/fault-suite.sh --quick    4 clients x 12 requests x 16 tokens (what CI runs) -> build/faults-quick.md
#   options: --out FILE, --clients N, --requests N, --tokens N, --only "NAME ..." (names: see SCENARIOS)
# Environment: TESSERA_BIN (default build/release/bin/tessera), TESSERA_MODEL_DIR (models/stories260K).
# The partition scenario needs root and `ip netns`; otherwise its row says why it was skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
BIN="${TESSERA_BIN:-$root/build/release/bin/tessera}"
MODEL="${TESSERA_MODEL_DIR:-$root/models/stories260K}"
quick=0
clients=8 requests=100 tokens=32
out=""
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; clients=4; requests=12; tokens=16 ;;
    --out) out="$2"; shift ;;
    --clients) clients="$2"; shift ;;
    --requests) requests="$2"; shift ;;
    --tokens) tokens="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "fault-suite: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || { [ $quick = 1 ] && out="$root/build/faults-quick.md" || out="$root/docs/faults.md"; }
[ -x "$BIN" ] || { echo "fault-suite: no tessera binary at $BIN (bash scripts/build release)" >&2; exit 2; }
[ -f "$MODEL/stories260K.bin" ] || { echo "fault-suite: skipped: no stories260K model in $MODEL" >&2; exit 77; }
sent=$((clients * requests))
fault_after=$((sent * 3 / 8))  # the fault lands with about 3/8 of the requests done

WORK="$(mktemp -d /tmp/tessera-faults.XXXXXX)"
declare -a PIDS=()
declare -a NETNS=()
declare -A URL PID
ROWS="$WORK/rows"
NOTES="$WORK/notes"
: >"$ROWS"
: >"$NOTES"
problems=()

stop_all() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}
cleanup() {
  stop_all
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  if [ ${#problems[@]} -eq 0 ]; then rm -rf "$WORK"; else echo "fault-suite: logs kept in $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD... : runs CMD in the background, waits for its "listening on" line, sets URL[NAME], PID[NAME].
start() {
  local name="$1"
  shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  PID[$name]=$pid
  local line=""
  for _ in $(seq 300); do
    line="$(grep -m1 -o 'listening on http://[0-9.]*:[0-9]*' "$WORK/$name.out" 2>/dev/null)" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "fault-suite: $name exited: $(tail -2 "$WORK/$name.err")" >&2
      return 1
    fi
    sleep 0.05
  done
  [ -n "$line" ] || { echo "fault-suite: $name did not start" >&2; return 1; }
  URL[$name]="${line#listening on }"
}

# CTRL (a control-plane URL) set: nodes register there and the router discovers them through it (--ctrl)
# instead of being given --nodes.
CTRL=""
serve() {
  local name="$1"
  shift
  start "$name" "$BIN" serve --model "$MODEL" --port 0 ${CTRL:+--ctrl "$CTRL"} "$@"
}
ROUTER_FLAGS=(--strategy round_robin --probe-interval-ms 250 --probe-timeout-ms 500 --unhealthy-threshold 2)
# router URLS [PORT]: with CTRL, the router discovers the nodes and this waits until it lists all of URLS.
router() {
  if [ -z "$CTRL" ]; then
    start router "$BIN" route --port "${2:-0}" --nodes "$1" "${ROUTER_FLAGS[@]}"
    return
  fi
  start router "$BIN" route --port "${2:-0}" --ctrl "$CTRL" "${ROUTER_FLAGS[@]}" || return 1
  wait_router_knows "${URL[router]}" "$1"
}
# wait_router_knows ROUTER URL,URL,...: until the router's /admin/nodes lists every URL (10 s at most).
wait_router_knows() {
  local want missing
  for _ in $(seq 200); do
    local nodes
    nodes="$(http_get "$1" /admin/nodes 2>/dev/null)"
    missing=0
    IFS=, read -ra want <<<"$2"
    for u in "${want[@]}"; do [[ $nodes == *"\"$u\""* ]] || missing=1; done
    [ "$missing" = 0 ] && return 0
    sleep 0.05
  done
  echo "fault-suite: the router did not discover $2 through the control plane" >&2
  return 1
}

# Two colocated nodes behind the router.
colocated2() {
  serve a && serve b && router "${URL[a]},${URL[b]}"
}
# Prefill/decode: prefill nodes p1 (with optional link faults in $1) and p2, decode nodes d1 and d2 (entry
# points, both using p1 then p2), the router in front of d1 and d2.
# PD_DECODE_FLAGS: extra flags for d1 and d2 (a scenario sets them).
PD_DECODE_FLAGS=()
pd_cluster() {
  local faults="${1:-}"
  if [ -n "$faults" ]; then
    start p1 env TESSERA_LINK_FAULTS="$faults" "$BIN" serve --model "$MODEL" --port 0 --role prefill \
      --link-endpoints faulty || return 1
  else
    serve p1 --role prefill || return 1
  fi
  serve p2 --role prefill || return 1
  for d in d1 d2; do
    start "$d" "$BIN" serve --model "$MODEL" --port 0 --role decode --prefill-nodes "${URL[p1]},${URL[p2]}" \
      --pd-min-tokens 4 ${CTRL:+--ctrl "$CTRL"} "${PD_DECODE_FLAGS[@]}" || return 1
  done
  if [ -n "$CTRL" ]; then router "${URL[d1]},${URL[d2]},${URL[p1]},${URL[p2]}"; else router "${URL[d1]},${URL[d2]}"; fi
}

# http_get URL PATH: the response (headers and body) of a GET, through bash's /dev/tcp (no curl needed).
http_get() {
  local hostport="${1#http://}"
  local host="${hostport%:*}" port="${hostport##*:}"
  exec 9<>"/dev/tcp/$host/$port" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$2" "$hostport" >&9
  timeout 5 cat <&9
  exec 9<&-
}
# metric URL NAME: one sample from a node's /metrics.
metric() {
  local v
  v="$(http_get "$1" /metrics 2>/dev/null | grep -F "$2 " | grep -v '^#' | head -1 | awk '{print $NF}')"
  echo "${v:-?}"
}
# reachable URL: waits (up to 10 s) until URL/health answers 200 from here.
reachable() {
  for _ in $(seq 100); do
    http_get "$1" /health 2>/dev/null | head -1 | grep -q ' 200 ' && return 0
    sleep 0.1
  done
  echo "fault-suite: $1 never answered /health" >&2
  return 1
}
pd_counters() {
  local s="" d
  for d in d1 d2; do
    [ -n "${PID[$d]:-}" ] && kill -0 "${PID[$d]}" 2>/dev/null || continue
    s+="$d: remote $(metric "${URL[$d]}" 'tessera_pd_requests_total{path="remote"}'), fallback "
    s+="$(metric "${URL[$d]}" 'tessera_pd_requests_total{path="fallback"}'), checksum mismatches "
    s+="$(metric "${URL[$d]}" 'tessera_pd_checksum_mismatches_total'); "
  done
  echo "${s%; }"
}

# load LABEL [FAULT_CMD]: runs the load (with the fault after $fault_after requests when given), adds a row.
load() {
  local label="$1" cmd="${2:-}"
  local args=(fault-load --url "${URL[router]}" --clients "$clients" --requests "$requests" --max-tokens "$tokens"
    --reference "$WORK/ref.jsonl" --row "$label")
  [ -n "$cmd" ] && args+=(--fault-after "$fault_after" --fault-cmd "$cmd")
  "$BIN" "${args[@]}" >"$WORK/load.out" 2>"$WORK/load.err"
  grep '^ROW ' "$WORK/load.out" | sed 's/^ROW //' >>"$ROWS"
  grep '^{' "$WORK/load.out" >"$WORK/$label.json"
  echo "fault-suite: $(grep '^ROW ' "$WORK/load.out" | sed 's/^ROW //')" >&2
}

# check LABEL KIND: KIND "redundant" (nothing lost, recovery <= 3 s) or "clean" (failures allowed, but each
# ended with an error the client could see, and requests sent after the fault were answered or refused fast).
check() {
  local label="$1" kind="$2"
  local row
  row="$(grep -F "| $label |" "$ROWS" | tail -1)"
  [ -n "$row" ] || { problems+=("$label: no result"); return; }
  IFS='|' read -r _ _ s c f lost dup text usage rec _ <<<"$row"
  s=$((s)) c=$((c)) f=$((f))
  lost="${lost// /}" dup="${dup// /}" text="${text// /}" usage="${usage// /}" rec="${rec// /}"
  if [ "$kind" = redundant ]; then
    [ "$f" -eq 0 ] || problems+=("$label: $f requests failed")
    [ "$lost" = 0 ] && [ "$dup" = 0 ] || problems+=("$label: tokens lost $lost, duplicated $dup")
    [ "$text" = 0 ] || problems+=("$label: $text completed requests with text unlike the reference")
    if [ "$rec" != "-" ] && ! awk -v r="$rec" 'BEGIN { exit !(r + 0 <= 3.0) }'; then
      problems+=("$label: recovery $rec s > 3 s")
    fi
  else
    [ $((c + f)) -eq "$s" ] || problems+=("$label: requests unaccounted for")
    if grep -q 'stream ended without finish_reason' "$WORK/$label.json"; then
      problems+=("$label: a stream ended without an error event")
    fi
  fi
  [ "$usage" = 0 ] || problems+=("$label: usage disagreed with the tokens sent in $usage requests")
}

scenario=0
scenario_done() {  # keeps each scenario's logs apart
  stop_all
  scenario=$((scenario + 1))
  mkdir -p "$WORK/$scenario"
  mv "$WORK"/*.out "$WORK"/*.err "$WORK/$scenario/" 2>/dev/null
}

echo "fault-suite: $clients clients x $requests requests x $tokens tokens per scenario; logs in $WORK" >&2

# 0. The fault-free reference (two colocated nodes); every scenario's tokens are compared with it.
colocated2 || exit 1
"$BIN" fault-load --url "${URL[router]}" --clients "$clients" --requests "$requests" --max-tokens "$tokens" \
  --write-reference "$WORK/ref.jsonl" --row "reference (no fault)" >"$WORK/load.out" 2>"$WORK/load.err"
grep '^ROW ' "$WORK/load.out" | sed 's/^ROW //' >>"$ROWS"
scenario_done

sc_prefill_kill() {  # a prefill node dies (2 prefill nodes): decode nodes move on to the other one
  local label="prefill node SIGKILL (2 prefill, 2 decode)"
  pd_cluster && load "$label" "kill -9 ${PID[p1]}"
  echo "prefill node SIGKILL: $(pd_counters)" >>"$NOTES"
  check "$label" redundant
}

sc_decode_kill() {  # a decode node dies mid-stream (2 decode nodes): the router migrates its streams
  local label="decode node SIGKILL mid-stream (2 prefill, 2 decode)"
  pd_cluster && load "$label" "kill -9 ${PID[d1]}"
  echo "decode node SIGKILL: router: $(grep -c 'continuing a broken stream' "$WORK/router.err") streams continued on the other decode node" >>"$NOTES"
  check "$label" redundant
}

sc_node_kill() {  # a colocated node dies mid-stream (2 nodes)
  local label="colocated node SIGKILL mid-stream (2 nodes)"
  colocated2 && load "$label" "kill -9 ${PID[a]}"
  echo "colocated node SIGKILL: router: $(grep -c 'continuing a broken stream' "$WORK/router.err") streams continued on the other node" >>"$NOTES"
  check "$label" redundant
}

sc_router_restart() {  # the router dies and restarts on its port; it rediscovers the nodes from the control plane
  local label="router SIGKILL + restart (1 router)"
  start ctrl "$BIN" ctrl --port 0 || return
  CTRL="${URL[ctrl]}"
  pd_cluster || { CTRL=""; return; }
  CTRL=""
  local rport="${URL[router]##*:}"
  cat >"$WORK/restart-router.sh" <<EOF
kill -9 ${PID[router]}
for i in \$(seq 100); do
  "$BIN" route --port $rport --ctrl "${URL[ctrl]}" ${ROUTER_FLAGS[*]} >"$WORK/router2.out" 2>"$WORK/router2.err" &
  echo \$! >"$WORK/router2.pid"
  for j in \$(seq 40); do grep -q 'listening on' "$WORK/router2.out" 2>/dev/null && exit 0; kill -0 \$! 2>/dev/null || break; sleep 0.025; done
  sleep 0.05
done
exit 1
EOF
  load "$label" "bash $WORK/restart-router.sh"
  [ -f "$WORK/router2.pid" ] && PIDS+=("$(cat "$WORK/router2.pid")")
  echo "router SIGKILL + restart: nodes registered with the control plane (tessera ctrl); the new router is started with only --ctrl and rediscovers all four nodes from it; streams open through the dead router fail with a broken connection, later requests succeed once a client's connection retry reaches the new router" >>"$NOTES"
  check "$label" clean
}

sc_ctrl_kill() {  # the control-plane process dies: serving continues on the last known membership
  local label="control plane SIGKILL"
  start ctrl "$BIN" ctrl --port 0 || return
  CTRL="${URL[ctrl]}"
  colocated2 && load "$label" "kill -9 ${PID[ctrl]}"
  CTRL=""
  echo "control plane SIGKILL: the nodes registered with the control plane and the router discovered them through it (--ctrl, no --nodes); after the control plane dies the router keeps serving on the last membership it knew" >>"$NOTES"
  check "$label" redundant
}

sc_link() {  # link faults on prefill node p1's KV writes, throughout the run (p2 is sound)
  local f="$1"
  local label="link ${f%%=*} (${f#*=} of p1's link operations)"
  pd_cluster "over=shm,seed=11,$f" && load "$label"
  local extra=""
  [ "${f%%=*}" = drop ] && extra=" (a dropped completion tag costs the decode node its 2 s tag grace before it redoes the transfer: the p99)"
  [ "${f%%=*}" = corrupt ] && extra=" (every corrupted transfer caught by its checksum and redone on p2)"
  echo "link ${f%%=*}: $(pd_counters)$extra" >>"$NOTES"
  check "$label" redundant
}
sc_link_corrupt() { sc_link "corrupt=p:0.3"; }
sc_link_drop() { sc_link "drop=p:0.1"; }
sc_link_disconnect() { sc_link "disconnect=p:0.05"; }

# Network partition: two colocated nodes, each in its own network namespace joined to the router's by a veth
# pair; the link to one is cut (its namespace's end goes down: packets vanish, no reset) while it streams.
sc_partition() {
  local label="network partition of one node (2 nodes in netns)"
  local why="" ns k
  if [ "$(id -u)" -ne 0 ]; then
    why="not root"
  elif ! command -v ip >/dev/null; then
    why="no ip command (iproute2)"
  elif ! ip netns add "tsf$$probe" 2>/dev/null; then
    why="ip netns add is not permitted here"
  else
    ip netns del "tsf$$probe"
    # A run that was killed (e.g. by a test timeout) leaves its namespaces and their 10.231.k.1 routes behind,
    # which make this run's addresses unreachable: remove those whose suite process is gone.
    local stale pid
    for stale in $(ip netns list | awk '{print $1}' | grep -E '^tsf[0-9]+n[12]$'); do
      pid="${stale#tsf}"
      pid="${pid%n[12]}"
      kill -0 "$pid" 2>/dev/null || ip netns del "$stale" 2>/dev/null
    done
    for k in 1 2; do
      ns="tsf$$n$k"
      { ip netns add "$ns" && NETNS+=("$ns") &&
        ip link add "tsf$$h$k" type veth peer name "tsf$$c$k" &&
        ip link set "tsf$$c$k" netns "$ns" &&
        ip addr add "10.231.$k.1/24" dev "tsf$$h$k" && ip link set "tsf$$h$k" up &&
        ip -n "$ns" addr add "10.231.$k.2/24" dev "tsf$$c$k" && ip -n "$ns" link set "tsf$$c$k" up &&
        ip -n "$ns" link set lo up; } || why="could not create the namespaces and veth pairs"
    done
  fi
  if [ -z "$why" ]; then
    start n1 ip netns exec "tsf$$n1" "$BIN" serve --model "$MODEL" --host 10.231.1.2 --port 8000 &&
      start n2 ip netns exec "tsf$$n2" "$BIN" serve --model "$MODEL" --host 10.231.2.2 --port 8000 &&
      reachable "${URL[n1]}" && reachable "${URL[n2]}" &&
      router "${URL[n1]},${URL[n2]}" &&
      load "$label" "ip -n tsf$$n1 link set tsf$$c1 down"
    echo "network partition: router probes every 250 ms with a 500 ms timeout, 2 failures eject; $(grep -c 'continuing a broken stream' "$WORK/router.err") streams continued on the other node mid-stream (requests that had received nothing yet are retried there instead)" >>"$NOTES"
    check "$label" redundant
  else
    echo "| $label | skipped: $why | | | | | | | | | | |" >>"$ROWS"
  fi
  stop_all
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  NETNS=()
}

sc_only_node_kill() {  # no redundancy: the only node dies
  local label="only node SIGKILL (1 node: no redundancy)"
  serve a && router "${URL[a]}" && load "$label" "kill -9 ${PID[a]}"
  echo "only node SIGKILL: $(grep -o '"errors":{[^}]*}' "$WORK/$label.json" | head -c 400)" >>"$NOTES"
  check "$label" clean
}

sc_only_prefill_kill() {  # the only prefill node dies: the decode node prefills locally
  local label="only prefill node SIGKILL (1 prefill, 1 decode)"
  serve p1 --role prefill && start d1 "$BIN" serve --model "$MODEL" --port 0 --role decode --prefill-nodes "${URL[p1]}" \
    --pd-min-tokens 4 && router "${URL[d1]}" && load "$label" "kill -9 ${PID[p1]}"
  echo "only prefill node SIGKILL: $(pd_counters) (the decode node prefills locally once no prefill node answers)" >>"$NOTES"
  check "$label" redundant
}

sc_prefill_hang() {  # a prefill node hangs (SIGSTOP): each decode node's breaker stops waiting on it
  local label="prefill node SIGSTOP (2 prefill, 2 decode; --pd-timeout-ms 1000)"
  PD_DECODE_FLAGS=(--pd-timeout-ms 1000)
  pd_cluster && load "$label" "kill -STOP ${PID[p1]}"
  PD_DECODE_FLAGS=()
  local b=""
  for d in d1 d2; do
    b+="$d: breaker opened $(metric "${URL[$d]}" tessera_pd_breaker_opened_total), calls not sent to the hung node "
    b+="$(metric "${URL[$d]}" tessera_pd_breaker_skipped_total); "
  done
  echo "prefill node SIGSTOP: $(pd_counters); ${b%; } (a request waits on the hung node only until the first timeout opens the breaker)" >>"$NOTES"
  kill -CONT "${PID[p1]}" 2>/dev/null
  check "$label" redundant
}

sc_drain() {  # a colocated node gets SIGTERM under load: it drains (its streams finish there), the other takes the rest
  local label="colocated node SIGTERM drain (2 nodes)"
  serve a --shutdown-grace-ms 60000 && serve b && router "${URL[a]},${URL[b]}" && load "$label" "kill -TERM ${PID[a]}"
  echo "colocated node SIGTERM drain: router: $(grep -c 'continuing a broken stream' "$WORK/router.err") streams continued elsewhere, $(grep -c 'is draining' "$WORK/router.err") drain notices; a: $(grep -c 'draining' "$WORK/a.err") drain log lines" >>"$NOTES"
  check "$label" redundant
}

sc_pd_kv_pressure() {  # PD decode nodes with one context of KV each (32 blocks, --max-num-seqs 1)
  local label="KV pressure on PD decode nodes (32 KV blocks each)"
  PD_DECODE_FLAGS=(--max-num-seqs 1)
  pd_cluster && load "$label"
  PD_DECODE_FLAGS=()
  local r=""
  for d in d1 d2; do r+="$d: waited for KV blocks $(metric "${URL[$d]}" tessera_pd_deferred_reservations_total); "; done
  echo "KV pressure on PD decode nodes: $(pd_counters); ${r%; }" >>"$NOTES"
  check "$label" redundant
}

sc_queue_overflow() {  # node a admits one request and queues one; b is idle: the router retries a's 429s on b
  local label="queue overflow with a spare node (a: --max-num-seqs 1 --max-queue 1)"
  serve a --max-num-seqs 1 --max-queue 1 && serve b && router "${URL[a]},${URL[b]}" && load "$label"
  echo "queue overflow: router: $(metric "${URL[router]}" 'tessera_router_upstream_failures_total{kind="429"}') answers 429 retried on the other node" >>"$NOTES"
  check "$label" redundant
}

SCENARIOS=(prefill_kill decode_kill node_kill router_restart ctrl_kill link_corrupt link_drop link_disconnect partition
  only_node_kill only_prefill_kill prefill_hang drain pd_kv_pressure queue_overflow)
for sc in "${SCENARIOS[@]}"; do
  [ -z "$only" ] || [[ " $only " == *" $sc "* ]] || continue
  "sc_$sc"
  scenario_done
done

# The report.
{
  echo "# Fault-injection report"
  echo
  echo "Written by \`scripts/fault-suite.sh$([ $quick = 1 ] && echo " --quick")\` on $(date -u '+%Y-%m-%d %H:%M UTC'),"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- . ':!docs/faults.md' 2>/dev/null || echo ' (with local changes)')."
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); every process on this one host."
  echo "Load per scenario: $clients clients x $requests streamed greedy completions of $tokens tokens (EOS ignored) through"
  echo "\`tessera route\` (round robin; probes every 250 ms, 500 ms timeout, 2 failures eject), model stories260K on the"
  echo "ref backend; the fault is injected once $fault_after requests have completed (link faults: throughout)."
  echo
  echo "Columns: *lost* / *dup* are tokens missing from / repeated in what clients received, against the fault-free"
  echo "reference run, by longest common subsequence over each request's token ids (the router forwards the ids of"
  echo "the tokens each data chunk carries to a client that asks with \`x-tessera-token-ids: 1\`); failed requests count"
  echo "what they missed. *text*: completed requests whose text differs from the reference. *usage*: requests whose"
  echo "\`usage.completion_tokens\` differed from the tokens received. *recovery*: from the fault until the last request it"
  echo "disturbed had ended (every request in flight at the fault, and every later one that failed or took more than"
  echo "twice, and 250 ms more than, the pre-fault p99, up to the first run of as many consecutive healthy requests as"
  echo "there are clients) and a request sent after the fault had succeeded; an upper bound,"
  echo "as it includes the normal remainder of in-flight requests the fault did not touch; *never*: no request sent"
  echo "after the fault succeeded. Latency is p50 / p99 in ms of successful requests: *before* ended before"
  echo "the fault, *after* started once recovered, *during* the rest."
  echo
  echo "| scenario | sent | completed | failed | lost | dup | text | usage | recovery s | latency before | during | after |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  cat "$ROWS"
  echo
  echo "Notes:"
  echo
  sed 's/^/- /' "$NOTES"
  echo
  if [ ${#problems[@]} -eq 0 ]; then
    echo "Verdict: every scenario with redundancy completed every request with no token lost or repeated and"
    echo "recovered within 3 s; the scenarios without redundancy failed cleanly."
  else
    echo "Verdict: FAILED:"
    for p in "${problems[@]}"; do echo "- $p"; done
  fi
  echo
  echo "For comparison, NVIDIA Dynamo's published fault tests lost 4 of 800 requests with 4 decode replicas and took"
  echo "about 45 s to recover."
} >"$out"
echo "fault-suite: wrote $out" >&2
if [ ${#problems[@]} -ne 0 ]; then
  printf 'fault-suite: FAILED: %s\n' "${problems[@]}" >&2
  exit 1
fi
