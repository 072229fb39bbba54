#!/usr/bin/env python3
"""drop_proxy.py: a TCP proxy in front of Redis (or a shard-server) that loses chosen commands.

    drop_proxy.py --redis-port P --match dl_arrive --drops 2 [--skip K] [--lose command|reply|error]
                  [--dataplane WORKER [--after-pushes K]] --port-file FILE [--log FILE]

Listens on a free loopback port (written to --port-file once listening) and relays every connection
to Redis on 127.0.0.1:P, both ways, byte for byte, except the first --drops client writes that contain
the --match bytes (after the first --skip such writes, relayed). With --lose command (the default) such
a write is not relayed: the proxy closes the connection at once, so Redis never runs the command. With
--lose reply it is relayed, Redis runs it, and the proxy closes the connection when the reply comes
instead of relaying it. Either way the client sees its command's connection go away with no reply:
what it sees when Redis is killed while the command is in flight, before it ran or after. With --lose
error it is not relayed either, and the proxy answers it with Redis's out-of-memory refusal (ERROR_REPLY)
on the same connection, which stays up: a command that Redis refused without running it. Each loss is
one line in --log. Standard library only; runs until killed (a test adds its pid to the processes it
kills on exit).

With --dataplane WORKER the proxy stands in front of a shard-server's data plane instead (--redis-port is
then its port, and the server advertises the proxy's: shard-server --advertise). --match names an
operation (get, push), and only WORKER's frames of it count: their msgpack header holds both, "op" and
"w" (common/format/blob.c). --lose error answers such a frame, each one when several came in one write (a
sync's gets go pipelined), with the data plane's `err` frame, code BADARG: the worker's sync fails at once
(common/format/dp_error.c), as when a server refuses the request. --after-pushes K counts only the frames
after WORKER's K-th push of shard 0, one per submission or round (its pushes go before its gets), so the
get refused is that submission's or round's, however many gets the worker sent before (registration,
retries). Proxies chain (one in front of another), so each of several workers can have its own.
"""
import argparse
import os
import socket
import sys
import threading

lock = threading.Lock()
# what Redis answers a write over its maxmemory (a refusal no client retries as a failover or a restart)
ERROR_REPLY = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


def mp_str(text):
    """text as a msgpack str (fixstr or str 8: all a header key or short value needs)"""
    b = text.encode()
    return (bytes([0xa0 | len(b)]) if len(b) < 32 else bytes([0xd9, len(b)])) + b


def dataplane_error(text):
    """A data-plane frame: 4-byte little-endian length, then the blob header {m, f, op: err, c, t}."""
    blob = bytes([0x85]) + mp_str("m") + mp_str("DLB") + mp_str("f") + bytes([1]) + mp_str("op") + mp_str("err") + \
        mp_str("c") + mp_str("BADARG") + mp_str("t") + mp_str(text)
    return len(blob).to_bytes(4, "little") + blob


def pump(src, dst, state, conn, to_redis):
    """Relay src to dst; conn["lose_reply"] is set by the client side, read by the Redis side."""
    try:
        while True:
            data = src.recv(65536)
            if not data or (not to_redis and conn["lose_reply"]):
                break
            if to_redis:
                with lock:
                    if state["arm"] and state["arm_left"] > 0 and all(m in data for m in state["arm"]):
                        state["arm_left"] -= 1
                    lose = state["left"] > 0 and state["arm_left"] == 0 and all(m in data for m in state["match"])
                    if lose and state["skip"] > 0:
                        state["skip"] -= 1
                        lose = False
                    if lose:
                        state["left"] -= 1
                        state["log"].write("lost the %s of a command containing %s\n" % (
                            state["lose"], state["what"]))
                        state["log"].flush()
                if lose and state["lose"] == "command":
                    break
                if lose and state["lose"] == "error":
                    # (one refusal per request: a data-plane client may have sent several at once, pipelined)
                    src.sendall(state["error"] * max(1, data.count(state["match"][0])))  # (a client waits for its reply: Redis has nothing to send meanwhile)
                    continue
                conn["lose_reply"] = conn["lose_reply"] or lose
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--match", required=True, help="bytes that mark a command to lose")
    ap.add_argument("--drops", type=int, default=1, help="how many such commands to lose")
    ap.add_argument("--skip", type=int, default=0, help="relay this many such commands first")
    ap.add_argument("--lose", choices=["command", "reply", "error"], default="command",
                    help="lose the command (it never runs), its reply (it runs), or answer it with an error")
    ap.add_argument("--dataplane", metavar="WORKER",
                    help="in front of a shard-server: --match is an operation of this worker's frames")
    ap.add_argument("--after-pushes", type=int, default=0, metavar="K",
                    help="with --dataplane: count only the frames after the worker's K-th push of shard 0")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", default="-")
    a = ap.parse_args()
    match, what, error, arm = [a.match.encode()], a.match, ERROR_REPLY, []
    if a.after_pushes and not a.dataplane:
        ap.error("--after-pushes needs --dataplane")
    if a.dataplane:
        arm = [mp_str("op") + mp_str("push"), mp_str("w") + mp_str(a.dataplane), mp_str("s") + bytes([0])]
        match = [mp_str("op") + mp_str(a.match), mp_str("w") + mp_str(a.dataplane)]
        what = "%s of %s" % (a.match, a.dataplane)
        error = dataplane_error("refused by drop_proxy")
    state = {"left": a.drops, "skip": a.skip, "match": match, "what": what, "error": error, "lose": a.lose,
             "arm": arm, "arm_left": a.after_pushes,
             "log": sys.stdout if a.log == "-" else open(a.log, "a")}
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    with open(a.port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.getsockname()[1])
    os.replace(a.port_file + ".tmp", a.port_file)
    while True:
        client, _ = srv.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", a.redis_port))
        except OSError:
            client.close()
            continue
        conn = {"lose_reply": False}
        threading.Thread(target=pump, args=(client, upstream, state, conn, True), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, state, conn, False), daemon=True).start()


if __name__ == "__main__":
    main()
