#!/usr/bin/env python3
"""Hostile clients for kvio serve (bench/serve.sh's hostile stage), asyncio
on plain sockets to 127.0.0.1 only. Each mode prints one JSON line of what
its requests came to:

  monitor PORT PID SECONDS  /health every 100 ms on a fresh connection (1 s
                            allowed) and the server's RSS, until SIGTERM or
                            SECONDS: the slowest answer, failures, the
                            largest RSS
  flood PORT N TIMEOUT      N concurrent completions (half streamed) from a
                            client that gives up after TIMEOUT s and goes
                            away: answered, refused (503 or a connection
                            refused or reset) or gone
  slowloris PORT N SECONDS  N connections trickling header lines (one a
                            second each, a cut one opened again) for SECONDS
  bodies PORT N BYTES HOLD  N connections each sending a completion of
                            BYTES but its last 10 bytes, held HOLD s, then
                            finished: answered or refused
"""
import asyncio
import json
import os
import signal
import sys
import time

HOST = "127.0.0.1"


def request_head(path, length, extra=""):
    return (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()


async def read_answer(reader):
    """Status and the whole answer (to the connection's end)."""
    data = await reader.read()
    line = data.split(b"\r\n", 1)[0].split()
    status = int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
    return status, data


# ---------- monitor ----------

def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


async def probe(port):
    start = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 1.0)
        writer.write(f"GET /health HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
                     .encode())
        status, _ = await asyncio.wait_for(read_answer(reader),
                                           max(0.0, 1.0 - (time.monotonic() - start)))
        writer.close()
        return status == 200, time.monotonic() - start
    except (OSError, asyncio.TimeoutError):
        return False, time.monotonic() - start


async def monitor(port, pid, seconds):
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    result = {"probes": 0, "failures": 0, "slowest_s": 0.0, "rss_max_bytes": 0,
              "rss_first_bytes": rss_bytes(pid), "first_failure_at_s": None}
    begin = time.monotonic()
    while not stop.is_set() and time.monotonic() - begin < seconds:
        ok, took = await probe(port)
        result["probes"] += 1
        result["slowest_s"] = max(result["slowest_s"], took)
        if not ok:
            result["failures"] += 1
            if result["first_failure_at_s"] is None:
                result["first_failure_at_s"] = round(time.monotonic() - begin, 2)
        result["rss_max_bytes"] = max(result["rss_max_bytes"], rss_bytes(pid))
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, 0.1 - took))
        except asyncio.TimeoutError:
            pass
    result["rss_last_bytes"] = rss_bytes(pid)
    return result


# ---------- flood ----------

async def one_completion(port, index, timeout, counts):
    stream = index % 2 == 1
    body = json.dumps({"prompt": [(index * 7 + i) % 50000 + 1 for i in range(64)],
                       "max_tokens": 64, "ignore_eos": True, "stream": stream}).encode()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(request_head("/v1/completions", len(body), "Connection: close\r\n") +
                         body)
            status, data = await read_answer(reader)
        if status == 200 and (b"[DONE]" in data if stream else b'"usage"' in data):
            counts["answered"] += 1
        elif status != 0:
            counts["refused"] += 1
            counts[f"status_{status}"] = counts.get(f"status_{status}", 0) + 1
        else:
            counts["refused"] += 1  # the connection closed with no answer
    except TimeoutError:
        counts["gone"] += 1  # the client gives up and goes away
    except OSError:
        counts["refused"] += 1  # refused or reset
    finally:
        if writer is not None:
            writer.close()


async def flood(port, count, timeout):
    counts = {"requests": count, "answered": 0, "refused": 0, "gone": 0}
    await asyncio.gather(*(one_completion(port, i, timeout, counts) for i in range(count)))
    return counts


# ---------- slowloris ----------

async def trickler(port, seconds, counts):
    end = time.monotonic() + seconds
    writer = None
    while time.monotonic() < end:
        try:
            if writer is None:
                _, writer = await asyncio.open_connection(HOST, port)
                writer.write(f"GET /health HTTP/1.1\r\nHost: {HOST}\r\n".encode())
                counts["opened"] += 1
            writer.write(b"X-Slow: 1\r\n")
            await writer.drain()
        except OSError:
            counts["cut"] += 1
            writer = None
        await asyncio.sleep(1.0)
        if writer is not None and writer.transport.is_closing():
            counts["cut"] += 1
            writer = None
    if writer is not None:
        writer.close()


async def slowloris(port, count, seconds):
    counts = {"connections": count, "opened": 0, "cut": 0}
    await asyncio.gather(*(trickler(port, seconds, counts) for _ in range(count)))
    return counts


# ---------- held bodies ----------

async def one_body(port, size, hold, counts):
    text = b'{"prompt": [1, 2, 3], "max_tokens": 2, "ignore_eos": true}'
    body = text + b" " * (size - len(text))
    writer = None
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(request_head("/v1/completions", size, "Connection: close\r\n"))
        for at in range(0, size - 10, 1 << 20):
            writer.write(body[at:min(at + (1 << 20), size - 10)])
            await writer.drain()
            if reader.at_eof():
                break
        # Held: an answer now is a refusal (503 before the body was read).
        try:
            status, _ = await asyncio.wait_for(read_answer(reader), hold)
            counts["refused"] += 1
            counts[f"status_{status}"] = counts.get(f"status_{status}", 0) + 1
            return
        except asyncio.TimeoutError:
            counts["held"] += 1
        writer.write(body[size - 10:])
        status, _ = await asyncio.wait_for(read_answer(reader), 60)
        counts["answered" if status == 200 else "refused"] += 1
    except (OSError, asyncio.TimeoutError):
        counts["refused"] += 1  # the server's 503 came and it closed while we sent
    finally:
        if writer is not None:
            writer.close()


async def bodies(port, count, size, hold):
    counts = {"requests": count, "held": 0, "answered": 0, "refused": 0}
    await asyncio.gather(*(one_body(port, size, hold, counts) for _ in range(count)))
    return counts


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    args = sys.argv[3:]
    if mode == "monitor":
        result = asyncio.run(monitor(port, int(args[0]), float(args[1])))
    elif mode == "flood":
        result = asyncio.run(flood(port, int(args[0]), float(args[1])))
    elif mode == "slowloris":
        result = asyncio.run(slowloris(port, int(args[0]), float(args[1])))
    elif mode == "bodies":
        result = asyncio.run(bodies(port, int(args[0]), int(args[1]), float(args[2])))
    else:
        sys.exit(f"serve_hostile.py: unknown mode {mode}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
