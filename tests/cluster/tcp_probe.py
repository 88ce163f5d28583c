"""Run inside a host's namespace: opens N TCP connections to ADDR:PORT that
send nothing (a stalled handshake), and reports for each whether the server
closed it within --watch seconds, and how. Holds the open ones for --hold
seconds, then closes them and prints one JSON line.

    python3 tcp_probe.py ADDR PORT N [--watch S] [--hold S]
"""

import argparse
import json
import select
import socket
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--watch", type=float, default=1.0)
    ap.add_argument("--hold", type=float, default=0.0)
    args = ap.parse_args()
    socks, out = [], []
    for _ in range(args.n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        t0 = time.monotonic()
        try:
            s.connect((args.addr, args.port))
            out.append({"connected": True, "t0": t0})
        except OSError as err:
            out.append({"connected": False, "error": str(err)})
        socks.append(s)
    deadline = time.monotonic() + args.watch
    pending = {i for i, o in enumerate(out) if o["connected"]}
    while pending and time.monotonic() < deadline:
        r, _, _ = select.select([socks[i] for i in pending], [], [], max(0.0, deadline - time.monotonic()))
        for s in r:
            i = socks.index(s)
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                data, how = None, "reset"
            if data:  # the server spoke first (its connect frame): still open
                out[i]["received"] = out[i].get("received", 0) + len(data)
                continue
            out[i]["closed"] = how if data is None else "eof"
            out[i]["closed_after_s"] = round(time.monotonic() - out[i]["t0"], 4)
            pending.discard(i)
    print(json.dumps({"ready": True, "conns": out}), flush=True)
    time.sleep(args.hold)
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
