"""maxclients_holder.py PORT DIR [--kill-others]: a Redis at its maxclients, for the tests (it_redis_maxclients,
it_redis_maxclients_server). One connection takes the only slot (CONFIG SET maxclients 1), with --kill-others
cuts every other client too, touches DIR/held, and holds the slot until DIR/release appears; then it raises
maxclients again (10000) and exits. Every reply is printed (the test's log shows what Redis said)."""
import os
import socket
import sys
import time


def main():
    port, folder = int(sys.argv[1]), sys.argv[2]
    s = socket.create_connection(("127.0.0.1", port))

    def cmd(*a):
        s.sendall(("*%d\r\n" % len(a) + "".join("$%d\r\n%s\r\n" % (len(x), x) for x in a)).encode())
        print(s.recv(1000), flush=True)

    cmd("CONFIG", "SET", "maxclients", "1")
    if "--kill-others" in sys.argv[3:]:
        cmd("CLIENT", "KILL", "SKIPME", "yes")
    open(os.path.join(folder, "held"), "w").close()
    while not os.path.exists(os.path.join(folder, "release")):
        time.sleep(0.05)
    cmd("CONFIG", "SET", "maxclients", "10000")


if __name__ == "__main__":
    main()
