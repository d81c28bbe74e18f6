"""A pottery (Python) Redlock peer for tests/integration/interop.rs: the lock on `resource`
over the masters on 127.0.0.1 at `ports`, taken the way pottery takes it (its own scripts, the
key `redlock:` + the resource name).

  python pottery_peer.py <port,port,...> <resource> hold   take it, say "acquired <value>",
                                                           release on a line of stdin, say "released"
  python pottery_peer.py <port,port,...> <resource> try    take it once and release it at once
                                                           ("acquired ..." then "released"), or say "busy"
"""
import sys

from pottery import Redlock
from redis import Redis

ports, resource, mode = sys.argv[1:4]
masters = {Redis(host="127.0.0.1", port=int(port), socket_timeout=1) for port in ports.split(",")}
lock = Redlock(key=resource, masters=masters, auto_release_time=10)
try:
    if not lock.acquire(blocking=False):
        print("busy", flush=True)
        sys.exit(0)
    # The value pottery set on the masters (private in pottery; its acquire returns at a
    # quorum, so no one master is sure to hold it yet).
    print(f"acquired {lock._uuid}", flush=True)
    if mode == "hold":
        # A line, or the end of stdin (the test went away): release either way.
        sys.stdin.readline()
    lock.release()
    print("released", flush=True)
finally:
    for master in masters:
        master.close()
