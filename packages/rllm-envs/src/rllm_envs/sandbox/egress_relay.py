"""Runs first inside a sandbox whose policy allows some network: relays 127.0.0.1:PORT to the
host's allowlisting proxy (a Unix socket mounted into the sandbox), then runs the program.

    python3 egress_relay.py PORT SOCKET -- PROGRAM ARGS...

The sandbox itself has no network (its own namespace, loopback only); this relay is the one
way out, and the proxy at the other end lets only the policy's allowlist through. Programs
reach it through HTTP_PROXY/HTTPS_PROXY. Standard library only: it runs on the sandbox's python3.
"""

import os
import signal
import socket
import sys
import threading


def pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def relay(client, proxy_path):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(proxy_path)
    except OSError:
        client.close()
        upstream.close()
        return
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
    pump(client, upstream)


def serve(listener, proxy_path):
    while True:
        client, _ = listener.accept()
        threading.Thread(target=relay, args=(client, proxy_path), daemon=True).start()


def main():
    port, proxy_path, separator, *argv = sys.argv[1:]
    if separator != "--" or not argv:
        raise SystemExit("usage: egress_relay.py PORT SOCKET -- PROGRAM ARGS...")
    listener = socket.socket()
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(64)
    child = os.fork()
    if child == 0:
        listener.close()
        os.execvp(argv[0], argv)
    threading.Thread(target=serve, args=(listener, proxy_path), daemon=True).start()
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):  # end the same way the program did
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
