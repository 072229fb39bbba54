#!/bin/sh
# it_deploy_stunnel.sh: remote workers through TLS with stunnel (docs/deploy.md, "Across machines", item 3).
# Debian's hiredis has no TLS, so TLS is a hop: on the Redis / shard-server machine, stunnel in server
# mode terminates TLS in front of Redis and in front of the shard-server's data port; on the worker
# machine, stunnel in client mode offers plain loopback ports and speaks TLS to them. Here both
# "machines" are 127.0.0.1 with different ports:
#
#   worker --redis redis://127.0.0.1:RC --[plain]--> stunnel client RC --[TLS]--> stunnel server RS --> Redis RP
#   worker -> owner 127.0.0.1:SC (advertised) ----> stunnel client SC --[TLS]--> stunnel server SS --> shard-server SP
#
# The TLS hops check both ends: the client verifies the server's certificate (its own CA file, host
# name), the server requires the client's certificate (mutual TLS). Two quadratic workers go only
# through the tunnels and complete 4 syncs; a plaintext or certificate-less client of the TLS ports
# gets nothing. Skips (77) if stunnel4/openssl cannot be installed.
. "$(dirname "$0")/lib.sh"
STUNNEL=$(command -v stunnel4 || command -v stunnel)
if [ -z "$STUNNEL" ] || ! command -v openssl >/dev/null 2>&1; then
  apt-get install -y stunnel4 openssl >/dev/null 2>&1
  STUNNEL=$(command -v stunnel4 || command -v stunnel)
fi
if [ -z "$STUNNEL" ] || ! command -v openssl >/dev/null 2>&1; then
  echo "SKIP: stunnel4 or openssl missing and could not be installed (apt-get install stunnel4 openssl)"; exit 77
fi

RUN=tls
start_redis                                  # RP = $PORT, the "server machine"'s plain Redis
RP=$PORT; pick_ports RS RC SP SS SC

# Self-signed certificates: one for the server side (name diloco-redis), one for the worker side.
cd "$TMP" || exit 1
for who in server client; do
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=diloco-$who" \
    -addext "subjectAltName=DNS:diloco-$who" -keyout "$who.key" -out "$who.crt" > "openssl-$who.log" 2>&1 \
    || fail "openssl could not make a certificate"
done
chmod 600 server.key client.key
cat > server-side.conf <<EOF
foreground = yes
pid =
output = $TMP/stunnel-server.log
debug = info
[redis-tls]
accept = 127.0.0.1:$RS
connect = 127.0.0.1:$RP
cert = $TMP/server.crt
key = $TMP/server.key
verifyPeer = yes
CAfile = $TMP/client.crt
[shard-tls]
accept = 127.0.0.1:$SS
connect = 127.0.0.1:$SP
cert = $TMP/server.crt
key = $TMP/server.key
verifyPeer = yes
CAfile = $TMP/client.crt
EOF
cat > worker-side.conf <<EOF
foreground = yes
pid =
output = $TMP/stunnel-client.log
debug = info
[redis]
client = yes
accept = 127.0.0.1:$RC
connect = 127.0.0.1:$RS
verifyChain = yes
CAfile = $TMP/server.crt
checkHost = diloco-server
cert = $TMP/client.crt
key = $TMP/client.key
[shard]
client = yes
accept = 127.0.0.1:$SC
connect = 127.0.0.1:$SS
verifyChain = yes
CAfile = $TMP/server.crt
checkHost = diloco-server
cert = $TMP/client.crt
key = $TMP/client.key
EOF
cd "$ROOT" || exit 1
"$STUNNEL" "$TMP/server-side.conf" > "$TMP/stunnel-server.out.log" 2>&1 & PIDS="$PIDS $!"
"$STUNNEL" "$TMP/worker-side.conf" > "$TMP/stunnel-client.out.log" 2>&1 & PIDS="$PIDS $!"
listening() { python3 -c "import socket,sys; s=socket.socket(); s.settimeout(1); sys.exit(s.connect_ex(('127.0.0.1',$1)))"; }
wait_until 10 'listening $RS && listening $SS && listening $RC && listening $SC' "stunnel to listen"
redis-cli -p "$RC" ping 2>/dev/null | grep -q PONG || fail "no PONG from Redis through the TLS tunnel"
say "Redis answers through stunnel (client 127.0.0.1:$RC -> TLS 127.0.0.1:$RS -> Redis 127.0.0.1:$RP)"

# Refusals: plaintext to the TLS port, and TLS without a client certificate, get nothing from Redis.
out=$(printf 'PING\r\n' | timeout 3 redis-cli -p "$RS" ping 2>&1)
echo "$out" | grep -q PONG && fail "a plaintext client got an answer from the TLS port"
tls_ping() { (printf 'PING\r\n'; sleep 1) | timeout 5 openssl s_client -quiet -connect "127.0.0.1:$RS" -CAfile "$TMP/server.crt" "$@" 2>&1; }
tls_ping -cert "$TMP/client.crt" -key "$TMP/client.key" | grep -q PONG || fail "a TLS client with the certificate got no answer"
tls_ping | grep -q PONG && fail "a TLS client without a certificate got an answer"

# The run: init and the shard-server on the "server machine" (plain Redis), the shard-server
# advertising the worker-side tunnel port; workers know only the tunnels.
init_run $RUN --trainer quadratic --numel 50000 --shards 4 --workers 2
start_server s1 --listen "127.0.0.1:$SP" --advertise "127.0.0.1:$SC" --lease-ttl-ms 3000
wait_until 10 '$RCLI HEXISTS "dl:{$RUN}:servers" s1 | grep -q 1' "the shard-server to register"
$RCLI HGET "dl:{$RUN}:servers" s1 | grep -q "127.0.0.1:$SC" || fail "the server does not advertise the tunnel port $SC"
URL="redis://127.0.0.1:$RC"
for w in w1 w2; do start_worker $w --sync-every 20 --steps 80 --heartbeat-interval 1; done
wait_workers w1 w2
r=$($RCLI HGET "dl:{$RUN}:state" round:0)
[ "$r" -ge 4 ] || fail "expected 4 syncs through the tunnels, the run is at round $r"
[ "$(shard_versions $RUN)" = "4 4 4 4" ] || fail "shard versions $(shard_versions $RUN), expected 4 4 4 4"
grep -q '"event":"sync"' "$TMP/w1.jsonl" || fail "w1 logged no sync"
# stunnel saw the traffic on both services (the workers had no other way to reach them)
grep -q "Service \[redis\] accepted connection" "$TMP/stunnel-client.log" || fail "no worker connection through the Redis tunnel"
grep -q "Service \[shard\] accepted connection" "$TMP/stunnel-client.log" || fail "no worker connection through the shard-server tunnel"
grep -q "Service \[shard-tls\] accepted connection" "$TMP/stunnel-server.log" || fail "no TLS connection reached the shard-server side"
say "2 workers, $r syncs, every byte through TLS (Redis and the shard-server's data plane)"
echo "PASS it_deploy_stunnel"
